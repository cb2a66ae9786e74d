"""The first look at the results, in a real browser (headless Chromium driven by Selenium): `mooring ui` on a
store holding one small comparison, and the comparison's report opened from disk. Skips, saying why, where no
Chromium and chromedriver are installed (`.ci/run` installs Debian's)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import COMPARED
from tests.test_ui import free_port, wait_for_page

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="no headless browser: Debian's chromium and chromium-driver are not installed")
def headless_chromium(profile: Path):
    """A headless Chromium with a new, empty profile in `profile`, driven by Selenium."""
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium must not look for drivers on the network
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1600,1000", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    return driver


@pytest.fixture
def browser(tmp_path):
    """A browser that has never opened MLflow."""
    driver = headless_chromium(tmp_path / "profile")
    yield driver
    driver.quit()


def wait_until(condition, what: str, limit: float = 180.0):
    """The condition's first truthy value; the limit only keeps a broken page from hanging the suite."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not seen within {limit:g} s: {what}")


def body_text(driver) -> str:
    return driver.find_element("tag name", "body").text


@pytest.fixture
def ui(finished_comparison, tmp_path):
    base, _, _ = finished_comparison
    uri = base.tracking.uri
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "ui", "--uri", uri, "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        wait_for_page(f"http://127.0.0.1:{port}/", proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_first_page_is_the_comparison_s_runs_with_their_accuracy_in_model_training_mode(finished_comparison, ui,
                                                                                             browser, tmp_path):
    from mlflow.tracking import MlflowClient

    base, comp, _ = finished_comparison
    experiment_id = MlflowClient(tracking_uri=base.tracking.uri).get_run(comp.parent_run_id).info.experiment_id
    browser.get(ui)
    wait_until(lambda: f"#/experiments/{experiment_id}/runs" in browser.current_url, "the experiment's runs page")
    wait_until(lambda: all(f"-{variant}-s{seed}" in body_text(browser) for variant in COMPARED for seed in (0, 1)),
               "the comparison's runs, expanded under its parent run")
    text = body_text(browser)
    browser.save_screenshot(str(tmp_path / "landing.png"))
    assert "final_global_accuracy" in text and "bytes_sent" in text and "wall_seconds" in text  # visible columns
    for row in comp.rows:  # each run's accuracy is on the page (MLflow prints its leading digits)
        if row["final_global_accuracy"] is not None:
            assert str(row["final_global_accuracy"])[:5] in text
    assert "Welcome to MLflow" not in text and "Start Demo" not in text  # not MLflow's GenAI home
    assert "Information about UI telemetry" not in text  # telemetry is off, so there is nothing to tell
    assert "Ask questions about your experiments" not in text  # the assistant panel did not open by itself
    assert browser.execute_script("return localStorage.getItem('mlflow.workflowType_v1')") == '"machine_learning"'
    # the user's own choice afterwards is kept: MLflow's switch, set to GenAI, stays GenAI on the next visit
    browser.execute_script("localStorage.setItem('mlflow.workflowType_v1', JSON.stringify('genai'))")
    browser.get(ui)
    wait_until(lambda: "#/experiments/" in browser.current_url, "the landing on the next visit")
    assert browser.execute_script("return localStorage.getItem('mlflow.workflowType_v1')") == '"genai"'


def test_the_report_opens_from_disk_with_its_table_and_its_plot(finished_comparison, browser, tmp_path):
    _, comp, out = finished_comparison
    browser.get(Path(out / "report.html").as_uri())
    browser.save_screenshot(str(tmp_path / "report.png"))
    summary = browser.find_elements("css selector", "table")[0].text.splitlines()
    assert [line.split()[0] for line in summary[1:]] == list(COMPARED)
    width = browser.execute_script("var i = document.querySelector('img'); return i.complete ? i.naturalWidth : 0")
    assert width > 300  # the accuracy plot, decoded from the file itself
    for row in comp.rows:  # each run links its MLflow run
        link = browser.find_element("link text", row["mlflow_run_id"][:8])
        assert link.get_attribute("href").endswith(f"/runs/{row['mlflow_run_id']}")
