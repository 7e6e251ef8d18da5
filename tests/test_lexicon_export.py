"""A stored lexicon exported in either form (``GET /v1/lexicons/{name}?format=json|pls``) through the
real API: each export stores again (PUT) as the same entries, hostile characters included, and the
default answer is still the document as uploaded."""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import pytest

from tests.test_lexicons import PLS, fresh_name, pls, put, stored
from tts_core.lexicon.lexicon_documents import parse_json_lexicon

JSON: Final = "application/json"
HOSTILE: Final[dict[str, Any]] = {
    "language": "en-US",
    "entries": [
        {"graphemes": ["AT&T"], "alias": "A T and T"},
        {"graphemes": ["<b>", "a<b"], "alias": "less than & ]]> greater"},
        {"graphemes": ['say "hi"', "it's"], "alias": "quote \" and ' apostrophe"},
        {"graphemes": ["\U0001d518\U0001d52b\U0001d526", "🙂"], "alias": "smile 😀", "case_sensitive": True},
        {"graphemes": ["שלום", "مرحبا"], "alias": "\u202eshalom\u202c \u200fmarhaba"},
        {"graphemes": ["tomato"], "phoneme": "təˈmɑːtoʊ", "alphabet": "ipa"},
    ],
}
JAPANESE: Final[dict[str, Any]] = {
    "language": "ja",
    "entries": [
        {"graphemes": ["東京"], "reading": "トーキョー", "accent": 0},
        {"graphemes": ["客"], "reading": "キャク", "accent": 1},
        {"graphemes": ["今日"], "reading": "コンニチ"},
    ],
}


def exported(client: httpx.Client, name: str, form: str) -> httpx.Response:
    answer = client.get(f"/v1/lexicons/{name}", params={"format": form})
    assert answer.status_code == 200, answer.text
    return answer


def entries_of(client: httpx.Client, name: str) -> Any:
    return exported(client, name, "json").json()


@pytest.mark.parametrize("lexicon", [HOSTILE, JAPANESE], ids=["hostile", "ja"])
def test_each_export_stores_again_as_the_same_entries(client: httpx.Client, lexicon: dict[str, Any]) -> None:
    name = stored(client, json.dumps(lexicon, ensure_ascii=False).encode(), JSON)
    as_json = entries_of(client, name)
    assert as_json == parse_json_lexicon(lexicon).to_json()
    as_pls = exported(client, name, "pls")
    assert as_pls.headers["content-type"].startswith(PLS)
    assert (
        as_pls.headers["x-ttsq-lexicon-version"] == client.get(f"/v1/lexicons/{name}").headers["x-ttsq-lexicon-version"]
    )
    from_pls = stored(client, as_pls.content, PLS)
    from_json = stored(client, json.dumps(as_json, ensure_ascii=False).encode(), JSON)
    assert entries_of(client, from_pls) == as_json
    assert entries_of(client, from_json) == as_json
    assert exported(client, from_pls, "pls").content == as_pls.content


def test_a_pls_upload_exports_as_json_and_is_still_read_back_as_uploaded(client: httpx.Client) -> None:
    document = pls(
        "<lexeme><grapheme>Nguyen</grapheme><alias>win</alias><example>Dr. Nguyen</example></lexeme>\n"
        '<lexeme><grapheme>tomato</grapheme><phoneme>təˈmɑːtəʊ</phoneme><phoneme prefer="true">təˈmɑːtoʊ</phoneme>'
        "</lexeme>"
    )
    name = stored(client, document)
    assert client.get(f"/v1/lexicons/{name}").content == document
    assert entries_of(client, name) == {
        "language": "en-US",
        "entries": [
            {"graphemes": ["Nguyen"], "alias": "win"},
            {"graphemes": ["tomato"], "phoneme": "təˈmɑːtoʊ", "alphabet": "ipa"},
        ],
    }
    assert put(client, fresh_name(), exported(client, name, "json").content, JSON).status_code == 200


def test_a_download_is_an_attachment_named_after_the_lexicon(client: httpx.Client) -> None:
    name = stored(client, json.dumps(HOSTILE, ensure_ascii=False).encode(), JSON)
    for form, extension in ((None, "json"), ("json", "json"), ("pls", "pls")):
        params = {"download": "true"} | ({"format": form} if form else {})
        answer = client.get(f"/v1/lexicons/{name}", params=params)
        assert answer.status_code == 200
        assert (
            answer.headers["content-disposition"]
            == f"attachment; filename=\"{name}.{extension}\"; filename*=UTF-8''{name}.{extension}"
        )
    assert "content-disposition" not in client.get(f"/v1/lexicons/{name}").headers


def test_an_unknown_form_or_lexicon_is_refused(client: httpx.Client) -> None:
    name = stored(client, pls("<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"))
    assert client.get(f"/v1/lexicons/{name}", params={"format": "xml"}).status_code == 422
    assert client.get(f"/v1/lexicons/{fresh_name()}", params={"format": "pls"}).status_code == 404
