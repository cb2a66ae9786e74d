"""The documentation site (mkdocs.yml, orchestrator/docs_site.py): it builds in strict mode (a broken link, anchor or
nav entry fails), its generated reference lists every CLI option and config key that the parser and the schema
hold now, and it opens in the headless browser of tests/test_ui_browser.py (skipped, saying why, without
Chromium)."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from orchestrator.cli import build_parser
from orchestrator.docs_site import nested_model, on_page_markdown, site_nav
from orchestrator.experiment.config import ExperimentConfig
from tests.test_ui_browser import browser  # noqa: F401  (the UI test's headless Chromium, a new profile)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built as CI builds it, strictly, into a temporary directory."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    site_dir = tmp_path_factory.mktemp("site")
    build(load_config(config_file=str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site_dir)))
    return site_dir


def parser_options() -> dict[str, set[str]]:
    """{"mooring config show": {"CONFIG", "--set", ...}} for every command, read from the parser itself."""
    found = {}

    def walk(prog: str, parser: argparse.ArgumentParser) -> None:
        found[prog] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(f"{prog} {name}", sub)
            elif not isinstance(action, argparse._HelpAction):
                found[prog] |= set(action.option_strings) or {action.metavar or action.dest}

    walk("mooring", build_parser()[0])
    return found


def schema_keys(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        block = nested_model(field.annotation)
        if block is not None:
            keys += schema_keys(block, f"{prefix}{name}.")
    return keys


def block_keys() -> list[str]:
    """Every method's hyperparameters, `algorithm.NAME.PARAM`, and every model's options, `model.OPTION`."""
    from tasks.algorithms import ALGORITHMS
    from tasks.models import MODELS

    methods = [f"algorithm.{name}.{param}" for name in ALGORITHMS.names()
               for param in ALGORITHMS.get(name).Params.model_fields]
    return methods + [f"model.{option}" for name in MODELS.names() for option in MODELS.get(name).params.model_fields]


def test_the_configuration_reference_holds_every_key_of_the_sweep_file():
    """Each choice of a sampler, a pruner and a parameter's distribution with its own keys, from the schema."""
    from typing import get_args

    from orchestrator.docs_site import config_reference, nested_models
    from pipelines.sweep_config import SweepConfig

    page = config_reference()
    section = page[page.index("## The sweep file"):]
    fields = SweepConfig.model_fields
    choices = {"sampler": nested_models(fields["sampler"].annotation), "pruner": nested_models(fields["pruner"].annotation),
               "params.KEY": nested_models(get_args(fields["params"].annotation)[1])}
    expected = schema_keys(SweepConfig) + [f"{key}.{name}" for key, blocks in choices.items() for block in blocks
                                           for name in block.model_fields]
    assert len(choices["sampler"]) == 3 and "params.KEY.choices" in expected
    assert [key for key in expected if f"- `{key}` (" not in section] == []
    assert "- `sampler.points` (int, default `4`, with `sampler.name = grid`)" in section


def test_the_site_builds_strictly_and_its_reference_holds_every_option_and_key(site):
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    options = parser_options()
    assert {"mooring run", "mooring config show", "mooring sweep"} <= options.keys()
    missing = {(command, o) for command, opts in options.items() for o in opts if f"<code>{o}" not in cli}
    assert not missing, f"CLI options not in the reference: {sorted(missing)}"
    config = (site / "reference" / "config.html").read_text(encoding="utf-8")
    keys = schema_keys()
    assert {"data.partition.alpha", "train.optimizer.lr", "privacy.models.noise_multiplier"} <= set(keys)
    missing_keys = [key for key in keys + block_keys() if f"<code>{key}</code>" not in config]
    assert not missing_keys, f"config keys not in the reference: {missing_keys}"
    assert "<code>algorithm.fedprox.mu</code>" in config and "<code>model.name = mlp</code>" in config
    algorithm = (site / "reference" / "algorithm.html").read_text(encoding="utf-8")
    assert "Algorithm.local_loss" in algorithm and "ClientUpdate" in algorithm
    assert not (ROOT / "docs" / "reference").exists(), "the generated pages belong to the build, not docs/"


def test_the_navigation_places_every_page_it_finds(tmp_path):
    for page in ("index.md", "claims.md", "zeta.md", "design.md", "methods/zeta.md", "methods/alpha.md",
                 "tables/accuracy.md", "tutorials/first.md"):
        (tmp_path / page).parent.mkdir(exist_ok=True)
        (tmp_path / page).write_text("# A page\n", encoding="utf-8")
    assert site_nav(tmp_path) == ["index.md", {"Topics": ["design.md", "zeta.md"]},
                                  {"Tutorials": ["tutorials/first.md"]},
                                  {"Methods": ["methods/alpha.md", "methods/zeta.md"]},
                                  {"Tables": ["tables/accuracy.md"]}, "claims.md", site_nav(tmp_path)[-1]]
    assert site_nav(tmp_path)[-1] == {"Reference": ["reference/cli.md", "reference/config.md",
                                                    "reference/algorithm.md"]}


def test_a_link_out_of_docs_becomes_the_file_s_path_and_a_broken_one_stays_for_strict_mode_to_refuse():
    page = SimpleNamespace(file=SimpleNamespace(src_path="methods/fedavg.md"))
    markdown = ("See [the README](../../README.md#use), [FedProx](fedprox.md), [gone](../../no_such.md), "
                "![a figure](../../docs/privacy_cost.png) and [a site](https://example.org/x.md).")
    assert on_page_markdown(markdown, page, {"docs_dir": str(ROOT / "docs")}) == (
        "See the README (`README.md`), [FedProx](fedprox.md), [gone](../../no_such.md), "
        "![a figure](../../docs/privacy_cost.png) and [a site](https://example.org/x.md).")


@pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                    reason="no headless browser: Debian's chromium and chromium-driver are not installed")
def test_the_built_site_opens_in_a_browser_and_its_reference_lists_every_option_and_key(site, browser):  # noqa: F811
    browser.get((site / "index.html").as_uri())
    assert "Mooring" in browser.title
    browser.find_element("link text", "command line").click()  # the home page's link, followed as a reader would
    sections = section_texts(browser)
    for command, opts in parser_options().items():
        assert command in sections, f"no section for {command}"
        missing = sorted(o for o in opts if o not in sections[command])
        assert not missing, f"{command}: options not shown in the browser: {missing}"
    browser.get((site / "reference" / "config.html").as_uri())
    text = browser.find_element("tag name", "article").text
    missing_keys = [key for key in schema_keys() if key not in text]
    assert not missing_keys, f"config keys not shown in the browser: {missing_keys}"


def section_texts(driver) -> dict[str, str]:
    """{h2 heading: the text of the lists under it} of the page's article, as the browser renders them (the lists of
    options, not the usage line above them)."""
    return driver.execute_script("""
        const out = {};
        let key = null;
        for (const node of document.querySelector('article').children) {
            if (node.tagName === 'H2') { key = node.firstChild.textContent.trim(); out[key] = ''; }
            else if (key !== null && node.tagName === 'UL') { out[key] += node.innerText + '\\n'; }
        }
        return out;""")
