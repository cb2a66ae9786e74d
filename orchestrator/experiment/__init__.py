"""What an experiment is: the config schema and YAML, the data it loads, the method object it builds and the method's settings and engine checks."""
