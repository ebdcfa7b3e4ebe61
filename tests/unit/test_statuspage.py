"""The status page as a document: well-formed, self-contained, polling the API."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from autoscaler.service.page import render_page

VOID = {"meta", "link", "br", "hr", "img", "input", "area", "base", "col", "source", "wbr"}


class Outline(HTMLParser):
    """Checks tags nest and close; collects attributes and the script's text."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.problems: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.ids: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [(tag, name, value) for name, value in attrs]
        self.ids += [value for name, value in attrs if name == "id" and value]
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
            return
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1] == "script":
            self.scripts.append(data)


def outline() -> Outline:
    parser = Outline()
    parser.feed(render_page())
    parser.close()
    return parser


def test_page_is_well_formed() -> None:
    """Every element opened is closed in order, and a test can find the parts by id."""
    page = outline()
    assert page.problems == []
    assert page.open == []
    assert render_page().startswith("<!DOCTYPE html>")
    assert {"service", "updated", "error", "jobs", "details"} <= set(page.ids)
    assert len(page.ids) == len(set(page.ids))


def test_page_is_self_contained() -> None:
    """No external script, style, image or font: the page works on a host offline."""
    page = outline()
    assert not [a for a in page.attrs if a[1] in {"src", "href"} and a[2] != "data:,"]
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", render_page(), re.IGNORECASE)
    assert "@import" not in render_page()
    assert "url(" not in render_page()


def test_script_polls_the_status_api_relative_to_the_page() -> None:
    """The script fetches ``api/v1/status`` (same origin, so the login cookie goes along)
    and shows a failed fetch instead of freezing on the last data."""
    script = "".join(outline().scripts)
    assert re.search(r"""fetch\(\s*["']api/v1/status["']""", script)
    assert "credentials" in script
    assert "setTimeout(refresh, 1000)" in script
    assert 'getElementById("error")' in script


def test_header_fields_follow_the_service_view() -> None:
    """The header has a cell for each ServiceView field it shows, and one for the user
    the page acts as (the status's ``user``)."""
    fields = {v for tag, name, v in outline().attrs if tag == "dd" and name == "data-field"}
    assert fields == {
        "pid",
        "provider",
        "state_dir",
        "jobs_by_state",
        "machines_alive",
        "quota",
        "spend",
        "projects",
        "users",
        "user",
    }


def test_api_strings_go_through_the_escaper() -> None:
    """Each JobView string field put into the page's HTML is wrapped in ``esc()``."""
    script = "".join(outline().scripts)
    for field in ("id", "name", "user", "state", "mode", "stop_reason", "waiting"):
        interpolations = re.findall(rf"\$\{{([^}}]*\bj\.{field}\b[^}}]*)\}}", script)
        assert interpolations, field
        unescaped = [
            i for i in interpolations if not re.match(r"(esc|clock|rel|money)\(", i.strip())
        ]
        assert unescaped == [], field
