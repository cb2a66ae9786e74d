"""What the documentation site's build (orchestrator/docs_site.py, the MkDocs hook) takes from outside docs/: the
KaTeX files it bundles, the tutorial notebook executed with its outputs, the methods' index."""
