"""English normalisation rules, each kept only where espeak-ng (``en-us``) misreads the raw form.

What each rule takes in, and what it leaves alone (measured: espeak-ng already reads it right, or
the form is ambiguous):

* **emails** ``ann.lee@example.co.uk``: "ann dot lee at example dot co dot uk" (``_`` underscore,
  ``-`` dash, ``+`` plus). Leaves: ``@handles`` without a domain.
* **urls** ``https://www.example.com/a-b``: scheme dropped, "w w w dot example dot com slash a dash
  b"; only hosts ending in a known top-level domain (:data:`TOP_LEVEL_DOMAINS`), so ``e.g.``,
  ``U.S.`` and ``3.5`` are not hosts. Leaves: query strings beyond ``? = &`` as written.
* **phones** ``+1 415-555-0100``, ``(415) 555-0100``, ``415-555-0100``, ``415.555.0100``,
  ``+44 20 7946 0958``: digit by digit, groups kept ("plus one, four one five, ..."). Leaves: a
  bare ``555-0100`` (as likely a range such as ``100-1200``), ``3-2`` scores, ``2019-2020``.
* **currency** ``$20``, ``$3.50``, ``-$3``, ``€1,200``, ``£3.50``, ``¥500``, ``$1.5M``, ``$5
  billion``, ``$2bn``: "twenty dollars", "three dollars and fifty cents", "minus three dollars",
  "one point five million dollars"; singular for exactly one. Leaves: ``US$``, amounts of more
  than 15 digits.
* **units** after a number, the unit symbol only (the number stays for espeak-ng): ``5 km``
  kilometers, ``1 km`` kilometer, ``5-km run`` kilometer, ``20°C`` degrees Celsius, ``60 mph``,
  ``80 km/h``, ``kg``, ``cm``, ``mm``, ``mg``, ``ml``, ``oz``, ``ft``, ``mi``, ``GB``, ``MB``,
  ``TB``, ``ms``, ``kW``, ``kWh``, ``min``, ``hr``. Leaves: ``%``, ``lbs``, ``GHz`` (read right),
  ``m``, ``g``, ``in``, ``l``, ``s`` and ``h`` (words or millions as often as units).
* **ordinals** with thousands separators, ``1,000th``: "one thousandth" (espeak-ng reads "one
  thousand" and a word "th" apart). Leaves every other ordinal (``21st``, ``3rd``, ``101st``:
  espeak-ng reads them right).
* **years** 1000 to 1999 where a word before says it is a year (:data:`YEAR_CONTEXT`: ``in 1984``,
  ``since 1066``, ``the summer of 1969``, ``March 5, 1984``): "nineteen eighty-four" (espeak-ng:
  "nineteen hundred eighty four"); decades ``1990s``, ``'90s``, ``1800s``, ``2010s``, ``20s``:
  "nineteen nineties", "nineties" (espeak-ng: "ninety" and a word "z"). Leaves: ``1900`` (read
  right), 1000 to 1009, 2000 to 2099 (espeak-ng's "two thousand twenty-four" is a correct reading),
  numbers without such a word (``1984 people``, ``won by 1200 votes``).
* **times** ``10:00``, ``12:00 noon``, ``3:05``, ``10:00 a.m.``: "ten o'clock", "twelve noon", "three
  oh five", "ten a.m." (espeak-ng: "ten zero zero", "three zero five"); only hours 1-12 and minutes
  00-09. Leaves: ``3:45`` and ``9 a.m.`` (read right), 24-hour ``14:00``, ``1:02:03`` durations.
* **abbreviations** titles before a capitalised name (``Dr. Smith``, ``Mr.``, ``Mrs.``, ``Ms.``,
  ``Prof.``, ``Gov.``, ``Sen.``, ``Rep.``, ``Gen.``, ``Sgt.``, ``Lt.``, ``Capt.``, ``Mt.``, ``St.
  Louis`` Saint), street words after one (``Main St.`` Street, ``Ave.``, ``Blvd.``, ``Rd.``),
  ``Jr.``, ``Sr.``, ``vs.``, ``approx.``, ``etc.``, ``i.e.``, ``No. 5`` and months before a day
  (``Jan. 5``). Their period ends espeak-ng's sentence (a pause and a falling tone); where it ends
  the writer's sentence too, it is kept. Leaves: ``Inc.``, ``e.g.``, initialisms (``A.I.``, ``U.S.``).
"""

from __future__ import annotations

import re
from typing import Final

from tts_core.text import spoken_numbers
from tts_core.text.normalization_rule import Edit, Rule

LANG: Final = "en"

TOP_LEVEL_DOMAINS: Final = (
    "com|org|net|edu|gov|mil|int|io|co|uk|us|ca|au|de|fr|jp|eu|ai|dev|app|info|biz|tv|me|ly|nz|ie|in"
)
"""Hosts must end in one of these: a dotted word such as ``e.g.`` or ``approx.`` is then no host."""

YEAR_CONTEXT: Final = (
    r"in|since|until|till|before|after|during|circa|year|early|late|mid|"
    r"(?:spring|summer|autumn|fall|winter|class|election|war) of"
)
"""Words after which a four-digit number in 1100-1999 is a year ("in 1984", "summer of 1969"); not
"by", "from", "of" or "around", which as often come before a quantity ("won by 1200 votes")."""

_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip
_MONTH_ABBREVIATIONS: Final = {m[:3]: m for m in _MONTHS if m != "May"} | {"Sept": "September"}

_SYMBOLS: Final = {
    ".": "dot", "/": "slash", "-": "dash", "_": "underscore", "+": "plus", "@": "at", "?": "question mark",
    "=": "equals", "&": "and", "#": "hash", "~": "tilde", ":": "colon",
}  # fmt: skip
_PIECES: Final = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]")
_SCHEME: Final = re.compile(r"^https?://")

EMAIL: Final = re.compile(
    r"(?<![\w.+%-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,6}"
    rf"\.(?:{TOP_LEVEL_DOMAINS})\b(?![.-]?\w)"
)
URL: Final = re.compile(
    rf"(?<![\w@./-])(?:https?://)?[A-Za-z0-9][A-Za-z0-9-]{{0,62}}(?:\.[A-Za-z0-9-]{{1,63}}){{0,6}}\.(?:{TOP_LEVEL_DOMAINS})"
    r"(?![\w-])(?:/[\w./?=&#~+-]{0,200}[\w/])?"
)
PHONE: Final = re.compile(
    r"(?<![\w+.-])(?:"
    r"\+\d{1,3}(?:[ .-]\(?\d{1,4}\)?){2,5}"  # international: +country and 2 to 5 groups
    r"|\(\d{3}\) ?\d{3}[-.]\d{4}"
    r"|\d{3}-\d{3}-\d{4}|\d{3}\.\d{3}\.\d{4}"
    r")(?![\w.-]?\d)"
)
CURRENCY: Final = re.compile(
    r"(?<![\w$€£¥])(-)?([$€£¥])(\d{1,3}(?:,\d{3}){1,4}|\d{1,15})(?:\.(\d{1,6}))?"
    r"(?:\s?(thousand|million|billion|trillion|bn|[kKMB])\b)?(?![\w,]?\d)"
)
UNIT: Final = re.compile(
    r"(?<![\w.,])(\d{1,3}(?:,\d{3}){1,4}|\d{1,15})(?:\.\d{1,6})?(-|\s?)"
    r"(km/h|kWh|kW|km|kg|cm|mm|mg|ml|mL|oz|ft|mi|mph|kph|GB|MB|TB|KB|ms|min|hrs|hr|°C|°F|°)(?![\w/°])"
)
ORDINAL: Final = re.compile(r"(?<![\w,.])(\d{1,3}(?:,\d{3}){1,4})(st|nd|rd|th)\b")
YEAR: Final = re.compile(
    rf"(?:\b(?:{YEAR_CONTEXT})|\b(?:{'|'.join(_MONTHS)})(?: \d{{1,2}}(?:st|nd|rd|th)?,)?) (1\d\d\d)(?![\w,.]?\d|')",
    re.IGNORECASE,
)
DECADE: Final = re.compile(r"(?<![\w'\u2019])(?:(1[1-9]|20)(\d)0|['\u2019]?([1-9])0)s\b")
TIME: Final = re.compile(r"(?<![\w:.])(1[0-2]|0?[1-9]):(0\d)(?![\w:]|\.\d)(?:( ?)([ap]\.?m\.?|noon|midnight)(?!\w))?")

_TITLES: Final = {
    "Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor", "Gov": "Governor",
    "Sen": "Senator", "Rep": "Representative", "Gen": "General", "Sgt": "Sergeant", "Lt": "Lieutenant",
    "Capt": "Captain", "Mt": "Mount", "St": "Saint",
}  # fmt: skip
_STREETS: Final = {"St": "Street", "Ave": "Avenue", "Blvd": "Boulevard", "Rd": "Road"}
_AFTER_NAME: Final = {"Jr": "Junior", "Sr": "Senior"}
_ANYWHERE: Final = {"vs": "versus", "approx": "approximately", "etc": "et cetera", "i.e": "that is"}
ABBREVIATION: Final = re.compile(
    r"(?<![\w.])(?:(?P<number>No)\.(?= \d)|(?P<month>Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.(?= \d)"
    r"|(?P<title>[A-Z][a-z]{0,3})\.(?= [A-Z])|(?P<word>[A-Z][a-z]{1,3})\.|(?P<anywhere>vs|approx|etc|i\.e)\.)"
)
_PRECEDED_BY_NAME: Final = re.compile(r"(?:[A-Z][\w'-]*|\d+(?:st|nd|rd|th)?),? $")
_NOT_NAMES: Final = frozenset({"The", "A", "An", "In", "At", "On", "To", "From", "Of", "And", "For", "By", "With"})
"""Capitalised words before "St." that start a sentence rather than name a street ("The St. Louis ...")."""

_UNITS: Final = {
    "km": "kilometer", "kg": "kilogram", "cm": "centimeter", "mm": "millimeter", "mg": "milligram",
    "ml": "milliliter", "mL": "milliliter", "oz": "ounce", "ft": "foot", "mi": "mile", "mph": "mile per hour",
    "kph": "kilometer per hour", "km/h": "kilometer per hour", "GB": "gigabyte", "MB": "megabyte",
    "TB": "terabyte", "KB": "kilobyte", "ms": "millisecond", "kW": "kilowatt", "kWh": "kilowatt hour",
    "min": "minute", "hr": "hour", "hrs": "hour", "°C": "degree Celsius", "°F": "degree Fahrenheit", "°": "degree",
}  # fmt: skip
_PLURALS: Final = {"foot": "feet", "mile per hour": "miles per hour", "kilometer per hour": "kilometers per hour",
                   "degree Celsius": "degrees Celsius", "degree Fahrenheit": "degrees Fahrenheit"}  # fmt: skip
_CURRENCIES: Final = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "", ""),
}
_MAGNITUDES: Final = {"k": "thousand", "K": "thousand", "M": "million", "B": "billion", "bn": "billion"}


def words(number: int) -> str:
    """A cardinal without num2words' commas (each would be read as a pause)."""
    return spoken_numbers.cardinal(number, LANG).replace(",", "")


def _decimal(whole: str, fraction: str | None) -> str:
    said = words(spoken_numbers.whole_number(whole))
    return f"{said} point {' '.join(words(int(d)) for d in fraction)}" if fraction else said


def _spelled(address: str) -> str:
    """Each run of letters and digits as written ("www" letter by letter), each symbol as its word."""
    return " ".join("w w w" if p == "www" else _SYMBOLS.get(p, p) for p in _PIECES.findall(address))


def _email(m: re.Match[str]) -> Edit:
    return Edit(m.start(), m.end(), _spelled(m.group()))


def _url(m: re.Match[str]) -> Edit:
    return Edit(m.start(), m.end(), _spelled(_SCHEME.sub("", m.group())))


def _phone(m: re.Match[str]) -> Edit:
    return Edit(m.start(), m.end(), spoken_numbers.telephone(m.group(), LANG))


def _currency(m: re.Match[str]) -> Edit:
    minus, sign, whole, fraction, magnitude = m.groups()
    one, many, cent, cents = _CURRENCIES[sign]
    amount = spoken_numbers.whole_number(whole)
    if magnitude:
        said = f"{_decimal(whole, fraction)} {_MAGNITUDES.get(magnitude, magnitude)} {many}"
    elif fraction and len(fraction) == 2 and cent:
        parts = [f"{words(amount)} {one if amount == 1 else many}"] if amount else []
        if int(fraction):
            parts.append(f"{words(int(fraction))} {cent if int(fraction) == 1 else cents}")
        said = " and ".join(parts) or f"zero {many}"
    else:
        said = f"{_decimal(whole, fraction)} {one if amount == 1 and not fraction else many}"
    return Edit(m.start(), m.end(), f"minus {said}" if minus else said)


def _unit(m: re.Match[str]) -> Edit:
    name = _UNITS[m.group(3)]
    singular = m.group(2) == "-" or (m.group().startswith("1") and m.start(2) == m.start() + 1)
    said = name if singular else _PLURALS.get(name, name + "s")
    joined = "-" if m.group(2) == "-" else " "
    return Edit(m.start(2), m.end(), joined + said)


def _ordinal(m: re.Match[str]) -> Edit | None:
    number = spoken_numbers.whole_number(m.group(1))
    expected = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th") if number % 100 not in (11, 12, 13) else "th"
    if m.group(2) != expected:
        return None
    return Edit(m.start(), m.end(), spoken_numbers.ordinal(number, LANG).replace(",", ""))


def _year(m: re.Match[str]) -> Edit | None:
    number = int(m.group(1))
    if number % 100 == 0 or (number < 1100 and number % 100 < 10):
        return None  # "nineteen hundred": espeak-ng says it so; "ten oh-five" is no reading
    return Edit(m.start(1), m.end(1), spoken_numbers.year(number, LANG))


def _decade(m: re.Match[str]) -> Edit:
    century, decade, short = m.groups()
    said = spoken_numbers.year(int(f"{century}{decade}0"), LANG) if century else words(int(short) * 10)
    last = said.rsplit(" ", 1)[-1].rsplit("-", 1)[-1]
    plural = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return Edit(m.start(), m.end(), said[: len(said) - len(last)] + plural)


def _time(m: re.Match[str]) -> Edit:
    hour, minutes, space, suffix = m.groups()
    said = words(int(hour))
    if int(minutes):
        said += f" oh {words(int(minutes))}"
    elif not suffix:
        said += " o'clock"
    return Edit(m.start(), m.end(), f"{said}{space}{suffix}" if suffix else said)


def _abbreviation(m: re.Match[str]) -> Edit | None:
    title, word, anywhere, number, month = (m["title"], m["word"], m["anywhere"], m["number"], m["month"])
    name = title or word
    may_end = False
    if name is not None:
        if _after_name(m.string, m.start()) and (name in _STREETS or name in _AFTER_NAME):
            said: str | None = _STREETS.get(name) or _AFTER_NAME.get(name)
            may_end = True
        else:
            said = _TITLES.get(title or "")
    else:
        said = _ANYWHERE.get(anywhere) or ("number" if number else _MONTH_ABBREVIATIONS.get(month or ""))
        may_end = anywhere == "etc"
    if said is None:
        return None
    if _ends_sentence(m.string, m.end(), may_end):
        said += "."
    return Edit(m.start(), m.end(), said)


def _after_name(text: str, at: int) -> bool:
    """A capitalised word (not one that starts sentences) or a house number just before ``at``."""
    found = _PRECEDED_BY_NAME.search(text[max(0, at - 40) : at])
    return found is not None and found.group().rstrip(", ") not in _NOT_NAMES


def _ends_sentence(text: str, end: int, may_end: bool) -> bool:
    """The abbreviation's period is the sentence's too: nothing follows, or (a street, a suffix,
    etc.) a capital does."""
    rest = text[end : end + 2]
    return rest.strip() == "" or (may_end and rest[:1] == " " and rest[1:].isupper())


RULES: Final[tuple[Rule, ...]] = (
    ("emails", EMAIL, _email),
    ("urls", URL, _url),
    ("phones", PHONE, _phone),
    ("currency", CURRENCY, _currency),
    ("times", TIME, _time),
    ("units", UNIT, _unit),
    ("ordinals", ORDINAL, _ordinal),
    ("years", DECADE, _decade),
    ("years", YEAR, _year),
    ("abbreviations", ABBREVIATION, _abbreviation),
)
"""In priority order: an edit overlapping an earlier rule's is dropped."""
