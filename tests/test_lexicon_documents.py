"""Lexicons as tenants upload them: W3C PLS 1.0 documents (the spec's own examples), ttsq's JSON
form, and every refusal, each saying where. Pure: no services."""

from __future__ import annotations

import re
import time

import pytest

from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.lexicon.lexicon_documents import LexiconLimits, check_entry, parse_json_lexicon, parse_pls

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">\n'
)
JA_HEAD = HEAD.replace('alphabet="ipa" xml:lang="en-US"', 'alphabet="x-katakana" xml:lang="ja"')


def pls(body: str, head: str = HEAD) -> bytes:
    return (head + body + "\n</lexicon>\n").encode("utf-8")


# The examples of the PLS 1.0 specification (sections 4.1, 4.4 to 4.9), written out.
SPEC_ROOT = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0"
      xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"
      xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
      xsi:schemaLocation="http://www.w3.org/2005/01/pronunciation-lexicon
        http://www.w3.org/TR/2007/CR-pronunciation-lexicon-20071212/pls.xsd"
      alphabet="ipa" xml:lang="en-US">
  <meta name="author" content="W3C Voice Browser Working Group"/>
  <metadata>
    <rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
             xmlns:dc="http://purl.org/dc/elements/1.1/">
      <rdf:Description rdf:about="" dc:title="Pronunciation lexicon for tomatoes"/>
    </rdf:RDF>
  </metadata>
  <lexeme>
    <grapheme>tomato</grapheme>
    <phoneme>təmei̥ɾou̥</phoneme>
    <!-- IPA string is: "t&#x259;mei&#x325;&#x27E;ou&#x325;" -->
  </lexeme>
</lexicon>
"""
SPEC_ENTRIES = """
  <lexeme>
    <grapheme>judgement</grapheme>
    <grapheme>judgment</grapheme>
    <phoneme>ˈdʒʌdʒ.mənt</phoneme>
  </lexeme>
  <lexeme>
    <grapheme>W3C</grapheme>
    <alias>World Wide Web Consortium</alias>
  </lexeme>
  <lexeme>
    <grapheme>Mr.</grapheme>
    <alias>mister</alias>
    <example>Mr. Smith</example>
  </lexeme>
  <lexeme>
    <grapheme>tomato</grapheme>
    <phoneme>təˈmɑːtəʊ</phoneme>
    <phoneme prefer="true">təˈmeɪtoʊ</phoneme>
  </lexeme>
  <lexeme role="claws:NN1" xmlns:claws="http://www.example.com/claws7tags">
    <grapheme>read</grapheme>
    <phoneme prefer="false">ɹiːd</phoneme>
    <alias prefer="true">reed</alias>
  </lexeme>"""


def test_spec_root_example_with_meta_metadata_and_a_comment() -> None:
    lexicon = parse_pls(SPEC_ROOT.encode("utf-8"))
    assert lexicon == Lexicon("en-US", (LexiconEntry(("tomato",), phoneme="t\u0259mei\u0325\u027eou\u0325"),))
    assert lexicon.primary_language == "en"


def test_spec_entries_alias_several_graphemes_and_prefer() -> None:
    assert parse_pls(pls(SPEC_ENTRIES)).entries == (
        LexiconEntry(("judgement", "judgment"), phoneme="ˈdʒʌdʒ.mənt"),
        LexiconEntry(("W3C",), alias="World Wide Web Consortium"),
        LexiconEntry(("Mr.",), alias="mister"),
        LexiconEntry(("tomato",), phoneme="təˈmeɪtoʊ"),
        LexiconEntry(("read",), alias="reed"),
    )


def test_whitespace_is_collapsed_and_character_references_read() -> None:
    body = "<lexeme><grapheme>\n  New \t York </grapheme><phoneme> nuː\n   &#x6A;ɔːk </phoneme></lexeme>"
    assert parse_pls(pls(body)).entries == (LexiconEntry(("New York",), phoneme="nuː jɔːk"),)


def test_japanese_katakana_document() -> None:
    body = (
        "<lexeme><grapheme>夏目</grapheme><phoneme>ナツ'メ</phoneme></lexeme>\n"
        "<lexeme><grapheme>漱石</grapheme><phoneme>ソーセキ</phoneme></lexeme>\n"
        "<lexeme><grapheme>ttsq</grapheme><alias>ティーティーエスキュー</alias></lexeme>\n"
        "<lexeme><grapheme>東京</grapheme><phoneme>トーキョー'</phoneme></lexeme>\n"
        '<lexeme><grapheme>Tokyo</grapheme><phoneme alphabet="ipa">toːkʲoː</phoneme></lexeme>'
    )
    assert parse_pls(pls(body, JA_HEAD)) == Lexicon(
        "ja",
        (
            LexiconEntry(("夏目",), reading="ナツメ", accent=2),
            LexiconEntry(("漱石",), reading="ソーセキ"),
            LexiconEntry(("ttsq",), alias="ティーティーエスキュー"),
            LexiconEntry(("東京",), reading="トーキョー", accent=4),  # ト ー キョ ー
            LexiconEntry(("Tokyo",), phoneme="toːkʲoː"),
        ),
    )


def test_a_declared_single_byte_encoding_is_read() -> None:
    document = pls("<lexeme><grapheme>café</grapheme><alias>kaffay</alias></lexeme>")
    latin = document.decode("utf-8").replace('encoding="UTF-8"', 'encoding="ISO-8859-1"').encode("latin-1")
    assert parse_pls(latin).entries == (LexiconEntry(("café",), alias="kaffay"),)


def where(refused: pytest.ExceptionInfo[InvalidLexicon]) -> tuple[int, int]:
    found = re.match(r"line (\d+), column (\d+): ", str(refused.value))
    assert found, str(refused.value)
    return int(found.group(1)), int(found.group(2))


LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{n} "{"&lol{};".format(n - 1 if n > 1 else "") * 10}">' for n in range(1, 10))
    + ']>\n<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon">&lol9;</lexicon>'
)


@pytest.mark.parametrize(
    ("document", "line", "column"),
    [
        (LAUGHS.encode(), 2, 1),
        (b'<!DOCTYPE lexicon [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<lexicon>&x;</lexicon>', 1, 1),
        (b'<?xml version="1.0"?>\n\n  <!DOCTYPE lexicon SYSTEM "http://example.com/pls.dtd"><lexicon/>', 3, 3),
        ('<?xml version="1.0" encoding="UTF-16"?>\n<!DOCTYPE x [<!ENTITY a "b">]><lexicon/>'.encode("utf-16"), 2, 13),
    ],
)
def test_dtds_and_entities_are_refused_before_any_expansion(document: bytes, line: int, column: int) -> None:
    """Where the declaration starts; in UTF-16 (no ASCII bytes to find it by) where the parser refused it."""
    started = time.monotonic()
    with pytest.raises(InvalidLexicon, match="DTDs and entity declarations are not allowed") as refused:
        parse_pls(document)
    assert where(refused) == (line, column)
    assert "root" not in str(refused.value)
    assert time.monotonic() - started < 5  # an expansion would take minutes and gigabytes


@pytest.mark.parametrize(
    ("document", "line", "column", "message"),
    [
        (pls("<lexeme><grapheme>a</grapheme>"), 4, 3, "mismatched tag"),
        (HEAD.encode() + b"<lexeme>\xff\xfe</lexeme></lexicon>", 3, 9, "not well-formed"),
        (b'<?xml version="1.0" encoding="Shift_JIS"?><lexicon/>', 1, 31, "multi-byte encodings are not supported"),
        (b"", 1, 1, "no element found"),
    ],
)
def test_not_well_formed_says_where(document: bytes, line: int, column: int, message: str) -> None:
    with pytest.raises(InvalidLexicon, match=message) as refused:
        parse_pls(document)
    assert where(refused) == (line, column)


def test_byte_limit_is_checked_before_parsing() -> None:
    with pytest.raises(InvalidLexicon, match="the lexicon has 31 bytes; at most 30"):
        parse_pls(b"<!DOCTYPE x><not xml" + b" " * 11, LexiconLimits(max_bytes=30))


VALID = """<lexeme>
  <grapheme>Nguyen</grapheme>
  <phoneme>ŋwiən</phoneme>
</lexeme>
<lexeme>
  <grapheme>SQL</grapheme>
  <alias>sequel</alias>
</lexeme>"""
"""Lexemes at line 3 and line 7 (column 1) of ``pls(VALID)``."""


def valid_document() -> str:
    return pls(VALID).decode("utf-8")


# Each way a valid document can go wrong: what to replace, with what, and the refusal's place and words.
MUTATIONS = [
    (
        '<lexicon version="1.0"',
        '<lexicon version="1.1"',
        "line 2, column 1: <lexicon> needs version=\"1.0\"; got '1.1'",
    ),
    ('<lexicon version="1.0"', "<lexicon", 'line 2, column 1: <lexicon> needs version="1.0"; it is missing'),
    ("01/pronunciation", "02/pronunciation", "line 2, column 1: <lexicon> needs xmlns="),
    ('alphabet="ipa" ', "", "line 2, column 1: <lexicon> needs the alphabet attribute"),
    ('xml:lang="en-US"', "", "line 2, column 1: <lexicon> needs the xml:lang attribute"),
    ('xml:lang="en-US"', 'xml:lang="english_US"', "line 2, column 1: <lexicon> xml:lang: language 'english_US'"),
    ('alphabet="ipa"', 'alphabet="x-sampa"', "line 2, column 1: alphabet 'x-sampa' is not supported"),
    ("<phoneme>", '<phoneme alphabet="x-foo">', "line 5, column 3: alphabet 'x-foo' is not supported"),
    ("<phoneme>", '<phoneme prefer="yes">', 'line 5, column 3: <phoneme> prefer must be "true" or "false"'),
    ("<phoneme>", '<phoneme ph="x">', "line 5, column 3: <phoneme> does not support the attribute 'ph'"),
    ("<alias>sequel", "<say>sequel</say><alias>sequel", "line 9, column 3: <say> is not a PLS element"),
    ("<grapheme>SQL", "SQL<grapheme>SQL", "line 8, column 1: text 'SQL' is not allowed in <lexeme>"),
    ("<grapheme>Nguyen</grapheme>", "<grapheme>  </grapheme>", "line 3, column 1: lexeme 1: grapheme 1 is empty"),
    ("<grapheme>Nguyen</grapheme>", "", "line 3, column 1: lexeme 1: has no <grapheme>"),
    ("<alias>sequel</alias>", "", "line 7, column 1: lexeme 2 ('SQL'): has no pronunciation"),
    ("ŋwiən", "", "line 3, column 1: lexeme 1 ('Nguyen'): phoneme is empty"),
    ("ŋwiən", "ŋwi2n", "line 3, column 1: lexeme 1 ('Nguyen'): phoneme 'ŋwi2n' holds the digit '2'"),
    ("ŋwiən", "ŋwiアン", "lexeme 1 ('Nguyen'): phoneme 'ŋwiアン' holds 'ア' (KATAKANA LETTER A), which is not IPA"),
    ("ŋwiən", "ŋwi$n", "lexeme 1 ('Nguyen'): phoneme 'ŋwi$n' holds '$' (DOLLAR SIGN), which is not IPA"),
    ("ŋwiən", "ŋ" * 201, "lexeme 1 ('Nguyen'): phoneme has 201 characters; at most 200"),
    ("Nguyen", "N" * 101, "line 3, column 1: lexeme 1 ('" + "N" * 101 + "'): grapheme 1 has 101 characters"),
    ("sequel", "&#x7;sequel", "line 9, column 10: reference to invalid character number"),
    ("<phoneme>ŋwiən", "<alias>win</alias><grapheme>x</grapheme><phoneme>ŋwiən", "line 5, column 21: <grapheme> must"),
    ("<phoneme>ŋwiən</phoneme>", "<phoneme><alias>x</alias></phoneme>", "line 5, column 12: <alias> cannot be"),
    (
        "<phoneme>ŋwiən</phoneme>",
        '<phoneme alphabet="x-katakana">ウィン</phoneme>',
        "a katakana reading belongs in a Japanese",
    ),
    (
        "<lexeme>\n  <grapheme>SQL",
        '<meta name="x"><lexeme/></meta><lexeme>\n  <grapheme>SQL',
        "line 7, column 16: <lexeme> cannot be inside <meta>",
    ),
]


def test_the_valid_document_is_valid() -> None:
    assert parse_pls(pls(VALID)).entries == (
        LexiconEntry(("Nguyen",), phoneme="ŋwiən"),
        LexiconEntry(("SQL",), alias="sequel"),
    )


@pytest.mark.parametrize(("old", "new", "message"), MUTATIONS)
def test_each_mutation_of_a_valid_document_is_refused(old: str, new: str, message: str) -> None:
    document = valid_document()
    assert old in document
    with pytest.raises(InvalidLexicon) as refused:
        parse_pls(document.replace(old, new, 1).encode("utf-8"))
    assert message in str(refused.value)


def test_the_root_must_be_a_lexicon_and_lexemes_are_counted() -> None:
    with pytest.raises(InvalidLexicon, match="line 1, column 1: the root element must be <lexicon>"):
        parse_pls(b"<lexeme/>")
    with pytest.raises(InvalidLexicon, match="line 1, column 1: <speak> is not a PLS element"):
        parse_pls(b"<speak>hello</speak>")
    with pytest.raises(InvalidLexicon, match="line 7, column 1: more than 1 lexemes"):
        parse_pls(pls(VALID), LexiconLimits(max_entries=1))
    assert len(parse_pls(pls(VALID), LexiconLimits(max_entries=2)).entries) == 2


@pytest.mark.parametrize(
    ("reading", "message"),
    [
        ("ナ'ツ'メ", "has more than one accent mark"),
        ("なつめ", "reading 'なつめ' holds 'な' (HIRAGANA LETTER NA); a reading is katakana only"),
        ("ナツ目", "holds '目' (CJK UNIFIED IDEOGRAPH-76EE)"),
        ("natsume", "holds 'n' (LATIN SMALL LETTER N)"),
        ("", "lexeme 1 ('夏目'): reading is empty"),
    ],
)
def test_katakana_readings_are_checked(reading: str, message: str) -> None:
    with pytest.raises(InvalidLexicon) as refused:
        parse_pls(pls(f"<lexeme><grapheme>夏目</grapheme><phoneme>{reading}</phoneme></lexeme>", JA_HEAD))
    assert message in str(refused.value)
    assert where(refused) == (3, 1)


def test_json_forms() -> None:
    data = {
        "language": "ja-JP",
        "entries": [
            {"graphemes": ["Nguyen"], "alias": "win"},
            {"graphemes": ["Nguyen", "Nguyễn"], "phoneme": " ŋwiən ", "alphabet": "ipa"},
            {"graphemes": ["夏目"], "reading": "ナツメ", "accent": 1, "case_sensitive": True},
            {"graphemes": ["漱石"], "reading": "ソ'ーセキ", "accent": 1},
            {"graphemes": ["東京"], "reading": "トーキョー", "accent": 0},
        ],
    }
    lexicon = parse_json_lexicon(data)
    assert lexicon == Lexicon(
        "ja-JP",
        (
            LexiconEntry(("Nguyen",), alias="win"),
            LexiconEntry(("Nguyen", "Nguyễn"), phoneme="ŋwiən"),
            LexiconEntry(("夏目",), reading="ナツメ", accent=1, case_sensitive=True),
            LexiconEntry(("漱石",), reading="ソーセキ", accent=1),
            LexiconEntry(("東京",), reading="トーキョー", accent=0),
        ),
    )
    assert parse_json_lexicon(lexicon.to_json()) == lexicon  # the stored form reads back


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a JSON lexicon is an object"),
        ({"language": "en", "entries": [], "version": 1}, "unknown keys in the lexicon: version"),
        ({"language": "en US", "entries": []}, "language: language 'en US' is not a BCP 47 tag"),
        ({"language": 5, "entries": []}, "language must be a string"),
        ({"language": "en", "entries": {}}, "entries must be a list"),
        ({"language": "en", "entries": ["x"]}, "entries[0]: an entry is an object"),
        ({"language": "en", "entries": [{"graphemes": "Nguyen", "alias": "win"}]}, "entries[0]: graphemes must"),
        ({"language": "en", "entries": [{"graphemes": [], "alias": "win"}]}, "entries[0]: graphemes must"),
        ({"language": "en", "entries": [{"graphemes": [3], "alias": "win"}]}, "entries[0]: graphemes must"),
        ({"language": "en", "entries": [{"graphemes": [""], "alias": "win"}]}, "entries[0]: grapheme 1 is empty"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "x", "phoneme": "a"}]}, "exactly one of"),
        ({"language": "en", "entries": [{"graphemes": ["a"]}]}, "entries[0] ('a'): needs exactly one of alias"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": 1}]}, "entries[0] ('a'): alias must be a string"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "b", "stress": 1}]}, "unknown keys stress"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "b", "alphabet": "ipa"}]}, "alphabet goes only"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "phoneme": "a", "alphabet": "x-sampa"}]}, "must be ipa"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "b", "accent": 1}]}, "accent goes only with"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "b", "case_sensitive": 1}]}, "true or false"),
        ({"language": "en-US", "entries": [{"graphemes": ["a"], "reading": "エー"}]}, "belongs in a Japanese (ja)"),
        ({"language": "ja", "entries": [{"graphemes": ["夏目"], "reading": "ナツメ", "accent": 4}]}, "outside 0..3"),
        ({"language": "ja", "entries": [{"graphemes": ["夏目"], "reading": "ナツメ", "accent": -1}]}, "outside 0..3"),
        ({"language": "ja", "entries": [{"graphemes": ["a"], "reading": "ア", "accent": True}]}, "whole number"),
        ({"language": "ja", "entries": [{"graphemes": ["夏目"], "reading": "ナツ'メ", "accent": 1}]}, "mark says 2"),
        ({"language": "ja", "entries": [{"graphemes": ["x"], "alias": "a"}] * 3}, "entries: 3 entries; at most 2"),
        ({"language": "en", "entries": [{"graphemes": ["a\uffff"], "alias": "b"}]}, "U+FFFF, which no XML (PLS)"),
        ({"language": "en", "entries": [{"graphemes": ["a"], "alias": "b\ud800"}]}, "U+D800, which no XML (PLS)"),
    ],
)
def test_json_refusals_name_the_entry(data: object, message: str) -> None:
    with pytest.raises(InvalidLexicon) as refused:
        parse_json_lexicon(data, LexiconLimits(max_entries=2))
    assert message in str(refused.value)


def test_json_entry_place_is_its_index_and_first_grapheme() -> None:
    entries = [{"graphemes": ["ok"], "alias": "okay"}] * 2 + [{"graphemes": ["Nguyen"], "phoneme": ""}]
    with pytest.raises(InvalidLexicon, match=re.escape("entries[2] ('Nguyen'): phoneme is empty")):
        parse_json_lexicon({"language": "en-US", "entries": entries})


def test_check_entry_alone() -> None:
    limits = LexiconLimits()
    check_entry(LexiconEntry(("a",), phoneme="ˈeɪ"), "en-GB", "here", limits)
    with pytest.raises(InvalidLexicon, match=r"here: reading .ナツ'メ. holds the accent mark"):
        check_entry(LexiconEntry(("夏目",), reading="ナツ'メ"), "ja", "here", limits)
    with pytest.raises(InvalidLexicon, match="here: has no grapheme"):
        check_entry(LexiconEntry((), alias="x"), "en", "here", limits)
    with pytest.raises(InvalidLexicon, match=r"here: grapheme 1 holds the control character '\\n'"):
        check_entry(LexiconEntry(("a\nb",), alias="x"), "en", "here", limits)


def test_a_reading_marked_before_its_first_mora_is_flat() -> None:
    """The mark follows the accented mora; written first, no mora is accented: accent 0, as JSON's."""
    lexicon = parse_pls(pls("<lexeme><grapheme>東京</grapheme><phoneme>'トーキョー</phoneme></lexeme>", JA_HEAD))
    assert lexicon.entries == (LexiconEntry(("東京",), reading="トーキョー", accent=0),)
