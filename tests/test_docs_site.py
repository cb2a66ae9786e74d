"""The documentation site (mkdocs.yml, orchestrator/docs_site.py): it builds in strict mode (a broken link, anchor or
nav entry fails), its generated reference lists every CLI option and config key that the parser and the schema
hold now, and it opens in the headless browser of tests/test_ui_browser.py (skipped, saying why, without
Chromium), one session for every page: formulas typeset, images decoded, no link to a missing page, the search
(served over http, as `make docs-serve` serves it) finds a method, the tutorial shows its outputs two clicks from
the home page, the methods' index lists every registered method."""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from orchestrator.cli import build_parser
from orchestrator.docs_site import nested_model, on_page_markdown, site_nav
from orchestrator.experiment.config import ExperimentConfig
from tests.test_ui import free_port, wait_for_page
from tests.test_ui_browser import (
    browser,  # noqa: F401  (the UI test's headless Chromium, a new profile)
    headless_chromium,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason="no headless browser: "
                                   "Debian's chromium and chromium-driver are not installed")


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
    assert "Algorithm.local_loss" in algorithm and "ClientUpdate" in algorithm and "derive_seeds" in algorithm
    assert not {"packed", "unpacked", "mixed"} & set(re.findall(r'<h2 id="([^"]+)"', algorithm))  # seeds' helpers
    assert not (ROOT / "docs" / "reference").exists(), "the generated pages belong to the build, not docs/"


def test_the_navigation_places_every_page_it_finds_under_a_short_label(tmp_path):
    pages = {"index.md": "---\ntitle: Home\n---\n\n# Mooring\n", "getting-started.md": "# Getting started\n",
             "claims.md": "# The claims\n", "design.md": "# Mooring: design, for contributors\n",
             "zeta.md": "# Zeta: a topic\n", "methods/zeta.md": "# Zeta (`zeta`) and `zeta_pm`\n",
             "methods/alpha.md": "# Alpha: a method\n", "tables/README.md": "# The tables\n",
             "tables/alpha.md": "# Alpha: Tables 1 and 2\n", "tables/alpha.short.md": "# Alpha: Tables 1 and 2\n",
             "how-to/run.md": "# Run; then read\n", "tutorials/notebook.ipynb": '{"metadata": {"title": "First"}}'}
    for page, text in pages.items():
        (tmp_path / page).parent.mkdir(exist_ok=True)
        (tmp_path / page).write_text(text, encoding="utf-8")
    assert site_nav(tmp_path) == [
        {"Getting started": [{"Home": "index.md"}, {"Getting started": "getting-started.md"}]},
        {"Tutorials": [{"First": "tutorials/notebook.md"}]},
        {"How-to": [{"Run": "how-to/run.md"}, {"Topics": [{"Zeta": "zeta.md"}]}]},
        {"Methods": [{"Overview": "methods/index.md"}, {"Alpha": "methods/alpha.md"}, {"Zeta": "methods/zeta.md"}]},
        {"Tables": [{"Overview": "tables/README.md"}, {"The claims": "claims.md"}, {"Alpha": "tables/alpha.md"},
                    {"Alpha, short budget": "tables/alpha.short.md"}]},
        {"Reference": [{"Command line": "reference/cli.md"}, {"Configuration": "reference/config.md"},
                       {"Algorithm interface": "reference/algorithm.md"}]},
        {"Design": [{"Mooring": "design.md"}]}]


def test_a_link_out_of_docs_becomes_the_file_s_path_and_a_broken_one_stays_for_strict_mode_to_refuse():
    page = SimpleNamespace(file=SimpleNamespace(src_path="methods/fedavg.md"))
    markdown = ("See [the README](../../README.md#use), [FedProx](fedprox.md), [gone](../../no_such.md), "
                "![a figure](../../docs/privacy_cost.png) and [a site](https://example.org/x.md).")
    assert on_page_markdown(markdown, page, {"docs_dir": str(ROOT / "docs")}) == (
        "See the README (`README.md`), [FedProx](fedprox.md), [gone](../../no_such.md), "
        "![a figure](../../docs/privacy_cost.png) and [a site](https://example.org/x.md).")


@needs_browser
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


# ------------------------------------------------------------------------------------- the site as a reader sees it
@pytest.fixture(scope="module")
def served(site):
    """The built site served over http on 127.0.0.1, as `make docs-serve` serves it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_page(f"http://127.0.0.1:{port}/", proc, limit=60)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """One headless Chromium for every page of the site."""
    driver = headless_chromium(tmp_path_factory.mktemp("reader") / "profile")
    yield driver
    driver.quit()


# what a page shows, read in the browser: formulas left raw or failed, images not decoded, the site's own links
PAGE_STATE = r"""
    const article = document.querySelector('article');
    const math = [...document.querySelectorAll('.arithmatex')];
    return {
        raw: math.filter(m => !m.querySelector('.katex')).map(m => m.textContent.slice(0, 60))
                 .concat(/\\\(|\\\[/.test(article.innerText) ? ['raw delimiters in the text'] : []),
        typeset: document.querySelectorAll('.katex').length,
        failed: document.querySelectorAll('.katex-error').length,
        broken: [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src),
        links: [...document.querySelectorAll('a[href]')].map(a => a.href.split('#')[0])
                   .filter(h => h.startsWith(location.origin)),
    };"""


@needs_browser
def test_every_page_typesets_its_formulas_decodes_its_images_and_links_to_no_missing_page(site, served, reader):
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    assert {"index.html", "methods/fedfa.html", "methods/index.html", "tutorials/notebook.html"} <= set(pages)
    links, typeset = set(), {}
    for page in pages:
        reader.get(served + page)
        state = reader.execute_script(PAGE_STATE)
        assert not state["raw"], f"{page}: formulas not typeset: {state['raw'][:3]}"
        assert not state["failed"], f"{page}: {state['failed']} formulas KaTeX could not typeset"
        assert not state["broken"], f"{page}: images not shown: {state['broken']}"
        links |= set(state["links"])
        typeset[page] = state["typeset"]
    assert typeset["methods/fedfa.html"] > 20 and typeset["methods/fedprox.html"] > 0
    missing = [link for link in sorted(links) if status(link) != 200]
    assert not missing, f"the site's own links that answer no page: {missing}"


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


@needs_browser
def test_the_search_served_over_http_finds_fedprox(served, reader):
    reader.get(served)
    reader.find_element("css selector", "label.md-search__icon, .md-search__input").click()
    reader.find_element("css selector", "input.md-search__input").send_keys("FedProx")
    results = wait_until(lambda: [r.text for r in reader.find_elements("css selector", ".md-search-result__item")],
                         "search results for FedProx", limit=60)
    assert any("FedProx" in text for text in results)
    assert reader.find_element("css selector", ".md-search-result__item a").get_attribute("href").startswith(served)


@needs_browser
def test_the_tutorial_is_two_clicks_from_home_and_shows_its_outputs(served, reader):
    reader.get(served)
    home = reader.find_element("tag name", "article")
    assert [row.text.split()[0] for row in home.find_elements("css selector", "table tbody tr")] == [
        "fedavg", "fedprox"]  # the tutorial's comparison, as the build ran it
    reader.find_element("link text", "Tutorials").click()  # the tab
    wait_until(lambda: reader.current_url.endswith("tutorials/notebook.html"), "the tutorial's page")
    article = reader.find_element("tag name", "article")
    figures = reader.execute_script("return [...document.querySelectorAll('article img')].map(i => i.naturalWidth)")
    assert len(figures) >= 2 and min(figures) > 200  # run.plot() and comp.plot(), drawn by the build's run
    assert len(article.find_elements("css selector", "table")) >= 3  # the history, the table, the mean curves
    assert "Run(fedprox, seed 0, 3 rounds" in article.text and "unknown algorithm" in article.text


@needs_browser
def test_the_methods_index_lists_every_registered_method(served, reader):
    from tasks.algorithms import ALGORITHMS

    reader.get(served)
    reader.find_element("link text", "Methods").click()
    wait_until(lambda: reader.current_url.endswith("methods/index.html"), "the methods' index")
    rows = reader.find_elements("css selector", "article table tbody tr")
    names = [re.search(r"\((\w+)\)", row.find_elements("tag name", "td")[0].text)[1] for row in rows]
    assert names == list(ALGORITHMS.names())
    fedprox = rows[names.index("fedprox")].text
    assert "global model" in fedprox and "the model" in fedprox and "FedFA" in fedprox  # in FedFA's table
