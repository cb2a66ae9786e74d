"""The shareable HTML report: escaped text, the figure inside the file, links to MLflow runs; the same parts as
Markdown."""
from __future__ import annotations

import base64
import re

from orchestrator.reporting import report


def test_a_report_escapes_text_embeds_its_figure_and_links_each_run(tmp_path):
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(40)))
    parts = [report.Table("Runs", ["variant", "MLflow run"],
                          [["<b>fedavg</b> & co", report.Link("abc12345", "http://h/#/experiments/1/runs/abc")],
                           ["fedfa", None]]),
             report.Figure("Accuracy by round", png), report.Note("a \"quoted\" note")]
    page = report.write_report(tmp_path / "r.html", "t<i>", "sub", parts).read_text()
    assert "<b>fedavg" not in page and "&lt;b&gt;fedavg&lt;/b&gt; &amp; co" in page  # text is text, never markup
    assert "<title>t&lt;i&gt;</title>" in page
    assert '<a href="http://h/#/experiments/1/runs/abc">abc12345</a>' in page
    assert "<td>–</td>" in page  # no run: a dash, not "None"
    [data] = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(data) == png.read_bytes()  # the figure travels inside the file
    assert "<script" not in page and "http-equiv" not in page and 'src="http' not in page  # nothing fetched or run
    assert [row.count("<td>") for row in re.findall(r"<tr>.*?</tr>", page)] == [0, 2, 2]


def test_run_links_open_on_the_tracking_server_or_in_mooring_ui():
    assert report.mlflow_run_url("http://mlflow.lab:5000/", "7", "r1") == "http://mlflow.lab:5000/#/experiments/7/runs/r1"
    assert report.mlflow_run_url("sqlite:////tmp/m.db", "7", "r1") == "http://127.0.0.1:5000/#/experiments/7/runs/r1"
    assert report.where_links_open("sqlite:////tmp/m.db") == \
        "Run links open in `mooring ui --uri sqlite:////tmp/m.db` (it serves http://127.0.0.1:5000)."


def test_the_markdown_report_escapes_text_links_its_figure_and_each_run(tmp_path):
    parts = [report.Table("Runs", ["variant", "MLflow run"],
                          [["fed|avg *x*", report.Link("abc", "http://h/#/runs/abc")], ["fedfa", None]]),
             report.Figure("Accuracy", tmp_path / "accuracy.png"), report.Note("worst10_accuracy\nspread")]
    page = report.write_markdown(tmp_path / "r.md", "t", "sub", parts).read_text()
    assert page == ("# t\n\nsub\n\n## Runs\n\n| variant | MLflow run |\n|---|---|\n"
                    "| fed\\|avg \\*x\\* | [abc](http://h/#/runs/abc) |\n| fedfa | – |\n\n"
                    "## Accuracy\n\n![Accuracy](accuracy.png)\n\nworst10\\_accuracy spread\n")
