"""The SSML subset: what each element becomes, what is refused (with line and column), and hardening
against entity tricks. Pure: no services."""

from __future__ import annotations

import time

import pytest

from tts_core.base.errors import InvalidSsml
from tts_core.text.speech_markup import Boundary, Break, Speech, parse_ssml


def pieces(body: str, lang: str = "en") -> list[object]:
    return list(parse_ssml(f"<speak>{body}</speak>", default_lang=lang).pieces)


def test_text_sentences_and_paragraphs() -> None:
    assert pieces("Hello   there.\n  Second line.") == [Speech("Hello there. Second line.")]
    assert pieces("<p><s>One.</s><s>Two.</s></p><p>Three.</p>") == [
        Speech("One."),
        Boundary("sentence"),
        Speech("Two."),
        Boundary("sentence"),
        Boundary("paragraph"),
        Speech("Three."),
        Boundary("paragraph"),
    ]
    assert pieces("Before.<p>Inside.</p>")[:2] == [Speech("Before."), Boundary("paragraph")]


@pytest.mark.parametrize(
    ("markup", "seconds"),
    [
        ('<break time="2s"/>', 2.0),
        ('<break time="350ms"/>', 0.35),
        ('<break time="1.5s"/>', 1.5),
        ('<break strength="x-strong"/>', 1.0),
        ('<break strength="none"/>', 0.0),
        ("<break/>", 0.4),
    ],
)
def test_breaks_are_exact(markup: str, seconds: float) -> None:
    assert pieces(f"One.{markup}Two.") == [Speech("One."), Break(seconds), Speech("Two.")]


def test_prosody_rates_multiply_and_split_runs() -> None:
    assert pieces('Normal <prosody rate="slow">slow <prosody rate="200%">back</prosody></prosody> end') == [
        Speech("Normal"),
        Speech("slow", 0.75),
        Speech("back", 1.5),
        Speech("end"),
    ]
    assert pieces('<prosody rate="+20%">a</prosody><prosody rate="-10%">b</prosody>') == [
        Speech("a", 1.2),
        Speech("b", 0.9),
    ]


def test_prosody_volumes_add_up_in_db_and_split_runs() -> None:
    found = pieces(
        'Normal <prosody volume="x-soft">quiet</prosody> <prosody volume="soft">'
        '<prosody volume="+3dB">a bit <sub alias="louder">LOUDER</sub></prosody></prosody>'
        ' <prosody volume="silent">gone</prosody> end'
    )
    assert [(p.text, p.rate) for p in found if isinstance(p, Speech)] == [
        ("Normal", 1.0), ("quiet", 1.0), ("a bit louder", 1.0), ("gone", 1.0), ("end", 1.0)
    ]  # fmt: skip
    gains = [p.gain for p in found if isinstance(p, Speech)]
    assert gains == pytest.approx([1.0, 10 ** (-12 / 20), 10 ** (-3 / 20), 0.0, 1.0])
    assert pieces('<prosody volume="medium" rate="slow">same level</prosody>') == [Speech("same level", 0.75)]


def test_say_as_sub_and_phoneme() -> None:
    assert pieces('<say-as interpret-as="characters">ABC</say-as>') == [Speech("A B C")]
    assert pieces('<say-as interpret-as="cardinal">1,234</say-as>') == [
        Speech("one thousand, two hundred and thirty-four")
    ]
    assert pieces('<say-as interpret-as="ordinal">3</say-as>') == [Speech("third")]
    assert pieces('<say-as interpret-as="date" format="mdy">3/5/2024</say-as>') == [
        Speech("March fifth twenty twenty-four")
    ]
    assert pieces('<say-as interpret-as="telephone">555-01</say-as>') == [Speech("five five five, zero one")]
    assert pieces('I live in <sub alias="New York">NY</sub>.') == [Speech("I live in New York .")]
    assert pieces('Say <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme> please') == [
        Speech("Say"),
        Speech("tomato", ipa="təˈmɑːtoʊ"),
        Speech("please"),
    ]


def test_japanese_runs_join_without_spaces_and_read_numbers_in_japanese() -> None:
    document = parse_ssml('<speak xml:lang="ja">今日は<say-as interpret-as="cardinal">123</say-as>円です。</speak>')
    assert document.lang == "ja"
    assert document.pieces == (Speech("今日は百二十三円です。"),)
    assert parse_ssml('<speak><say-as interpret-as="date">2024-03-05</say-as></speak>', "ja").pieces == (
        Speech("2024年3月5日"),
    )


def test_characters_count_the_spoken_text_not_the_markup() -> None:
    document = parse_ssml('<speak><p><s>Hi.</s></p><break time="1s"/><sub alias="Doctor">Dr.</sub></speak>')
    assert document.spoken_text == "Hi. Doctor"


@pytest.mark.parametrize(
    ("source", "line", "column", "message"),
    [
        ("<speak>\n<p>\nunclosed\n</speak>", 4, 3, "mismatched tag"),
        ("<speak>\n  <audio src='x'/></speak>", 2, 3, "<audio> is not supported"),
        ('<speak><break time="11s"/></speak>', 1, 8, "at most 10s"),
        ('<speak><break time="soon"/></speak>', 1, 8, "like 500ms or 2s"),
        ('<speak><prosody pitch="high">x</prosody></speak>', 1, 8, "attribute 'pitch'"),
        ('<speak><prosody rate="400%">x</prosody></speak>', 1, 8, "within 0.5x to 2x"),
        ('<speak><prosody volume="+13dB">x</prosody></speak>', 1, 8, "within -40 dB to +12 dB; got +13 dB"),
        ('<speak><prosody volume="x-loud"><prosody volume="+1dB">x</prosody></prosody></speak>', 1, 33, "got +13 dB"),
        ('<speak><prosody volume="50%">x</prosody></speak>', 1, 8, "prosody volume must be one of silent, x-soft"),
        ("<speak><s><p>x</p></s></speak>", 1, 11, "<p> cannot be inside <s>"),
        ('<speak><say-as interpret-as="spell">x</say-as></speak>', 1, 8, "interpret-as must be one of"),
        ('<speak><say-as interpret-as="cardinal">many</say-as></speak>', 1, 8, "not a whole number"),
        ('<speak><say-as interpret-as="date" format="mdy">2/30/2024</say-as></speak>', 1, 8, "say-as date"),
        ('<speak><phoneme alphabet="x-sampa" ph="a">a</phoneme></speak>', 1, 8, 'alphabet="ipa"'),
        ("<p>no speak</p>", 1, 1, "root element must be <speak>"),
        ("plain text", 1, 1, "syntax error"),
        ("<speak>   </speak>", 1, 1, "nothing to speak"),
    ],
)
def test_invalid_ssml_says_where(source: str, line: int, column: int, message: str) -> None:
    with pytest.raises(InvalidSsml) as refused:
        parse_ssml(source)
    assert (refused.value.line, refused.value.column) == (line, column), str(refused.value)
    assert message in str(refused.value)
    assert refused.value.code == "invalid_ssml"


def test_entity_tricks_are_refused_before_any_expansion() -> None:
    laughs = '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{n} "{"&lol{};".format(n - 1 if n > 1 else "") * 10}">' for n in range(1, 10)
    )
    laughs += "]>\n<speak>&lol9;</speak>"
    external = '<!DOCTYPE speak [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>'
    for source in (laughs, external, '<!DOCTYPE speak SYSTEM "http://example.com/x.dtd"><speak>x</speak>'):
        started = time.perf_counter()
        with pytest.raises(InvalidSsml, match="DTDs and entity declarations are not allowed") as refused:
            parse_ssml(source)
        assert time.perf_counter() - started < 5  # an expansion would take minutes and gigabytes
        assert refused.value.line in (1, 2)
    with pytest.raises(InvalidSsml, match="undefined entity"):
        parse_ssml("<speak>&lol;</speak>")
