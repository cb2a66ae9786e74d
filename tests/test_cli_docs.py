"""The README, the user guide (docs/how-to/) and the CLI without dead ends: links and their anchors resolve, the
README stays a short guide that reaches every page of the user guide, every option explains itself, `config show`
shows the active algorithm's block, and the cluster guide says what `--help` says."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from orchestrator.cli import build_parser
from orchestrator.commands.config import resolved_yaml
from orchestrator.docs_site import GENERATED
from orchestrator.experiment.config import load_config

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


GUIDE = ROOT / "docs" / "how-to"  # the user guide's pages, which the README links to


def relative_links(markdown: Path) -> list[str]:
    return [t for t in LINK.findall(markdown.read_text()) if "://" not in t and not t.startswith(("#", "mailto:"))]


def heading_anchors(markdown: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and the site's toc both make them."""
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", markdown.read_text(), re.M)}


def dead_links(markdown: Path) -> list[str]:
    """The relative links of a page to no file, or to a heading its target page lacks (own anchors included); the
    pages the site generates (docs_site.GENERATED) count as files: tests/test_docs_site.py builds them."""
    generated = {(ROOT / "docs" / page).resolve() for page in GENERATED}
    dead = []
    for target in LINK.findall(markdown.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        linked = (markdown.parent / path).resolve() if path else markdown
        if linked in generated:
            continue
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked)):
            dead.append(target)
    return dead


def test_dead_links_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A heading\n[ok](#a-heading) [gone](gone.md) [bad](#no-such-heading) [self](page.md)\n")
    assert dead_links(page) == ["gone.md", "#no-such-heading"]


def test_every_relative_link_in_the_readme_and_the_guide_resolves_with_its_anchor():
    assert "docs/design.md" in relative_links(ROOT / "README.md")
    pages = [ROOT / "README.md", ROOT / "docs" / "design.md", ROOT / "benchmarks" / "README.md",
             *sorted(GUIDE.glob("*.md"))]
    dead = {str(page.relative_to(ROOT)): dead_links(page) for page in pages}
    assert {page: links for page, links in dead.items() if links} == {}


def test_the_readme_is_a_short_guide_that_links_to_every_page_of_the_user_guide():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 160  # issue 42: a guide of about 150 lines, not a lab notebook
    linked = {(ROOT / t.split("#")[0]).resolve() for t in relative_links(readme)}
    guide = sorted(GUIDE.glob("*.md"))
    assert guide and [str(page.relative_to(ROOT)) for page in guide if page.resolve() not in linked] == []
    seconds = re.findall(r"\d+(?:\.\d+)? s\b", readme.read_text())
    assert seconds == [], f"measured timings belong in benchmarks/README.md, not the README: {seconds}"


def every_action(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_action(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_has_help_text():
    parser, _ = build_parser()
    undocumented = [f"{path} {a.option_strings or a.dest}" for path, a in every_action(parser, "mooring")
                    if not (a.help or "").strip()]
    assert undocumented == []


def test_the_cluster_guide_and_help_agree_on_address_defaults():
    parser, _ = build_parser()
    helps = {(path, tuple(a.option_strings)): a.help for path, a in every_action(parser, "mooring")}
    readme = " ".join((GUIDE / "cluster.md").read_text().split())
    submit_help = helps[("mooring submit", ("--address",))]
    assert "RAY_API_SERVER_ADDRESS, RAY_ADDRESS" in submit_help
    assert "defaults to `RAY_API_SERVER_ADDRESS`, else `RAY_ADDRESS`, else `http://127.0.0.1:8265`" in readme
    assert "RAY_ADDRESS if set, else a new local Ray instance" in helps[("mooring run", ("--address",))]
    assert "defaults to `RAY_ADDRESS`, else a new local Ray instance" in readme


def test_config_show_prints_the_active_algorithms_block_with_defaults():
    cfg = load_config(str(ROOT / "configs/default.yaml"), ["algorithm.name=fedprox"])
    shown = yaml.safe_load(resolved_yaml(cfg))
    assert shown["algorithm"]["name"] == "fedprox"
    assert shown["algorithm"]["fedprox"] == {"mu": 0.01}  # the paper default, though the config sets none
    cfg = load_config(str(ROOT / "configs/default.yaml"), ["algorithm.name=fedfa", "algorithm.fedfa.mu=0.3"])
    block = yaml.safe_load(resolved_yaml(cfg))["algorithm"]["fedfa"]
    assert block["mu"] == 0.3 and block["lam"] == 0.5


# a page and its sections: "docs/methods/fedfa.md §6.1", "docs/methods/fedfm.md §2–§5, §12"
CITATION = re.compile(r"docs/methods/(\w+)\.md ((?:§[0-9.]*[0-9](?:[–,] ?)?)+)")


def cited_sections() -> dict[tuple[str, str], str]:
    """{(page, section): a file that cites it}, from the code, the configs and the docs."""
    cited = {}
    for pattern in ("orchestrator/**/*.py", "tasks/**/*.py", "pipelines/**/*.py", "benchmarks/**/*.py", "tests/*.py",
                    "configs/**/*.yaml", "*.md", "docs/**/*.md", "benchmarks/*.md"):
        for path in ROOT.glob(pattern):
            for page, sections in CITATION.findall(path.read_text(encoding="utf-8")):
                for section in re.findall(r"§([0-9.]*[0-9])", sections):
                    cited.setdefault((page, section), str(path.relative_to(ROOT)))
    return cited


def test_every_section_the_code_cites_is_a_heading_of_a_method_page_in_the_repository():
    cited = cited_sections()
    assert {"feddebias", "fedfa", "fedfm", "fednh", "fedsa"} <= {page for page, _ in cited}  # the five papers' methods
    missing = []
    for (page, section), where in sorted(cited.items()):
        text = (ROOT / "docs" / "methods" / f"{page}.md").read_text(encoding="utf-8")
        if not re.search(rf"^(#+ |\*\*)§{re.escape(section)} ", text, re.M):  # a heading or a paragraph's label
            missing.append(f"{where} cites docs/methods/{page}.md §{section}")
    assert missing == []


def test_every_registered_method_has_its_page_and_nothing_cites_a_file_outside_the_repository():
    from tasks.algorithms import ALGORITHMS

    pages = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "methods").glob("*.md"))
    assert [name for name in ALGORITHMS.names() if f"`{name}`" not in pages] == []
    outside = [str(p.relative_to(ROOT)) for pattern in ("orchestrator/**/*.py", "tasks/**/*.py", "pipelines/**/*.py",
                                                         "configs/**/*.yaml", "*.md", "docs/**/*.md")
               for p in ROOT.glob(pattern) if re.search(r"(?<![\w/])specs/\w+\.md", p.read_text(encoding="utf-8"))]
    assert outside == []
