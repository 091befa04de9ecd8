"""The Unicode rules of TensorFlow's text ops, in plain Python.

`python_tokenizer` needs what ICU (tensorflow-text's normalization and case
folding, TensorFlow's lower-casing) and RE2 (TensorFlow's regular
expressions) know of each character. Python's `unicodedata` knows the same
for every character its Unicode version assigns; the tables below hold what
TensorFlow does for the characters where the versions disagree: characters
that Python's version does not assign yet, and the case mappings that
TensorFlow's lower-casing (an older ICU) lacks. They were read from
TensorFlow's own ops over every code point, and tests/text/test_python_tokenizer.py
reads them again.
"""

import functools
import unicodedata

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): NFKC_Casefold removes them.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)

# Read from TensorFlow 2.21.0 and tensorflow-text 2.21.1 against
# Python's unicodedata 14.0.0: the general categories RE2 knows that Python's
# version does not (RE2 asks only Mn, P, Cf, Cc, Zs, Co, Cs).
_NEWER_CATEGORIES = {
    "Cf": ((0x13439, 0x1343F),),
    "Mn": (
        (0xECE, 0xECE),
        (0x10EFD, 0x10EFF),
        (0x11241, 0x11241),
        (0x11F00, 0x11F01),
        (0x11F36, 0x11F3A),
        (0x11F40, 0x11F40),
        (0x11F42, 0x11F42),
        (0x13440, 0x13440),
        (0x13447, 0x13455),
        (0x1E08F, 0x1E08F),
        (0x1E4EC, 0x1E4EF),
    ),
    "Po": (
        (0x11B00, 0x11B09),
        (0x11F43, 0x11F4F),
    ),
}
# Characters Python's version does not assign, with ICU's NFC mapping.
_NFC_MAP = {}
# Characters Python's version does not assign, with ICU's NFD mapping.
_NFD_MAP = {
    0x105C9: "\U000105d2\u0307",
    0x105E4: "\U000105da\u0307",
    0x11383: "\U00011382\U000113c9",
    0x11385: "\U00011384\U000113bb",
    0x1138E: "\U0001138b\U000113c2",
    0x11391: "\U00011390\U000113c9",
    0x113C5: "\U000113c2\U000113c2",
    0x113C7: "\U000113c2\U000113b8",
    0x113C8: "\U000113c2\U000113c9",
    0x16121: "\U0001611e\U0001611e",
    0x16122: "\U0001611e\U00016129",
    0x16123: "\U0001611e\U0001611f",
    0x16124: "\U00016129\U0001611f",
    0x16125: "\U0001611e\U00016120",
    0x16126: "\U0001611e\U0001611e\U0001611f",
    0x16127: "\U0001611e\U00016129\U0001611f",
    0x16128: "\U0001611e\U0001611e\U00016120",
    0x16D68: "\U00016d67\U00016d67",
    0x16D69: "\U00016d63\U00016d67",
    0x16D6A: "\U00016d63\U00016d67\U00016d67",
}
# Characters Python's version does not assign, with ICU's NFKC mapping.
_NFKC_MAP = {
    0x1CCD6: "A",
    0x1CCD7: "B",
    0x1CCD8: "C",
    0x1CCD9: "D",
    0x1CCDA: "E",
    0x1CCDB: "F",
    0x1CCDC: "G",
    0x1CCDD: "H",
    0x1CCDE: "I",
    0x1CCDF: "J",
    0x1CCE0: "K",
    0x1CCE1: "L",
    0x1CCE2: "M",
    0x1CCE3: "N",
    0x1CCE4: "O",
    0x1CCE5: "P",
    0x1CCE6: "Q",
    0x1CCE7: "R",
    0x1CCE8: "S",
    0x1CCE9: "T",
    0x1CCEA: "U",
    0x1CCEB: "V",
    0x1CCEC: "W",
    0x1CCED: "X",
    0x1CCEE: "Y",
    0x1CCEF: "Z",
    0x1CCF0: "0",
    0x1CCF1: "1",
    0x1CCF2: "2",
    0x1CCF3: "3",
    0x1CCF4: "4",
    0x1CCF5: "5",
    0x1CCF6: "6",
    0x1CCF7: "7",
    0x1CCF8: "8",
    0x1CCF9: "9",
    0x1E030: "\u0430",
    0x1E031: "\u0431",
    0x1E032: "\u0432",
    0x1E033: "\u0433",
    0x1E034: "\u0434",
    0x1E035: "\u0435",
    0x1E036: "\u0436",
    0x1E037: "\u0437",
    0x1E038: "\u0438",
    0x1E039: "\u043a",
    0x1E03A: "\u043b",
    0x1E03B: "\u043c",
    0x1E03C: "\u043e",
    0x1E03D: "\u043f",
    0x1E03E: "\u0440",
    0x1E03F: "\u0441",
    0x1E040: "\u0442",
    0x1E041: "\u0443",
    0x1E042: "\u0444",
    0x1E043: "\u0445",
    0x1E044: "\u0446",
    0x1E045: "\u0447",
    0x1E046: "\u0448",
    0x1E047: "\u044b",
    0x1E048: "\u044d",
    0x1E049: "\u044e",
    0x1E04A: "\ua689",
    0x1E04B: "\u04d9",
    0x1E04C: "\u0456",
    0x1E04D: "\u0458",
    0x1E04E: "\u04e9",
    0x1E04F: "\u04af",
    0x1E050: "\u04cf",
    0x1E051: "\u0430",
    0x1E052: "\u0431",
    0x1E053: "\u0432",
    0x1E054: "\u0433",
    0x1E055: "\u0434",
    0x1E056: "\u0435",
    0x1E057: "\u0436",
    0x1E058: "\u0437",
    0x1E059: "\u0438",
    0x1E05A: "\u043a",
    0x1E05B: "\u043b",
    0x1E05C: "\u043e",
    0x1E05D: "\u043f",
    0x1E05E: "\u0441",
    0x1E05F: "\u0443",
    0x1E060: "\u0444",
    0x1E061: "\u0445",
    0x1E062: "\u0446",
    0x1E063: "\u0447",
    0x1E064: "\u0448",
    0x1E065: "\u044a",
    0x1E066: "\u044b",
    0x1E067: "\u0491",
    0x1E068: "\u0456",
    0x1E069: "\u0455",
    0x1E06A: "\u045f",
    0x1E06B: "\u04ab",
    0x1E06C: "\ua651",
    0x1E06D: "\u04b1",
}
# Characters Python's version does not assign, with ICU's NFKD mapping.
_NFKD_MAP = {
    0x105C9: "\U000105d2\u0307",
    0x105E4: "\U000105da\u0307",
    0x11383: "\U00011382\U000113c9",
    0x11385: "\U00011384\U000113bb",
    0x1138E: "\U0001138b\U000113c2",
    0x11391: "\U00011390\U000113c9",
    0x113C5: "\U000113c2\U000113c2",
    0x113C7: "\U000113c2\U000113b8",
    0x113C8: "\U000113c2\U000113c9",
    0x16121: "\U0001611e\U0001611e",
    0x16122: "\U0001611e\U00016129",
    0x16123: "\U0001611e\U0001611f",
    0x16124: "\U00016129\U0001611f",
    0x16125: "\U0001611e\U00016120",
    0x16126: "\U0001611e\U0001611e\U0001611f",
    0x16127: "\U0001611e\U00016129\U0001611f",
    0x16128: "\U0001611e\U0001611e\U00016120",
    0x16D68: "\U00016d67\U00016d67",
    0x16D69: "\U00016d63\U00016d67",
    0x16D6A: "\U00016d63\U00016d67\U00016d67",
    0x1CCD6: "A",
    0x1CCD7: "B",
    0x1CCD8: "C",
    0x1CCD9: "D",
    0x1CCDA: "E",
    0x1CCDB: "F",
    0x1CCDC: "G",
    0x1CCDD: "H",
    0x1CCDE: "I",
    0x1CCDF: "J",
    0x1CCE0: "K",
    0x1CCE1: "L",
    0x1CCE2: "M",
    0x1CCE3: "N",
    0x1CCE4: "O",
    0x1CCE5: "P",
    0x1CCE6: "Q",
    0x1CCE7: "R",
    0x1CCE8: "S",
    0x1CCE9: "T",
    0x1CCEA: "U",
    0x1CCEB: "V",
    0x1CCEC: "W",
    0x1CCED: "X",
    0x1CCEE: "Y",
    0x1CCEF: "Z",
    0x1CCF0: "0",
    0x1CCF1: "1",
    0x1CCF2: "2",
    0x1CCF3: "3",
    0x1CCF4: "4",
    0x1CCF5: "5",
    0x1CCF6: "6",
    0x1CCF7: "7",
    0x1CCF8: "8",
    0x1CCF9: "9",
    0x1E030: "\u0430",
    0x1E031: "\u0431",
    0x1E032: "\u0432",
    0x1E033: "\u0433",
    0x1E034: "\u0434",
    0x1E035: "\u0435",
    0x1E036: "\u0436",
    0x1E037: "\u0437",
    0x1E038: "\u0438",
    0x1E039: "\u043a",
    0x1E03A: "\u043b",
    0x1E03B: "\u043c",
    0x1E03C: "\u043e",
    0x1E03D: "\u043f",
    0x1E03E: "\u0440",
    0x1E03F: "\u0441",
    0x1E040: "\u0442",
    0x1E041: "\u0443",
    0x1E042: "\u0444",
    0x1E043: "\u0445",
    0x1E044: "\u0446",
    0x1E045: "\u0447",
    0x1E046: "\u0448",
    0x1E047: "\u044b",
    0x1E048: "\u044d",
    0x1E049: "\u044e",
    0x1E04A: "\ua689",
    0x1E04B: "\u04d9",
    0x1E04C: "\u0456",
    0x1E04D: "\u0458",
    0x1E04E: "\u04e9",
    0x1E04F: "\u04af",
    0x1E050: "\u04cf",
    0x1E051: "\u0430",
    0x1E052: "\u0431",
    0x1E053: "\u0432",
    0x1E054: "\u0433",
    0x1E055: "\u0434",
    0x1E056: "\u0435",
    0x1E057: "\u0436",
    0x1E058: "\u0437",
    0x1E059: "\u0438",
    0x1E05A: "\u043a",
    0x1E05B: "\u043b",
    0x1E05C: "\u043e",
    0x1E05D: "\u043f",
    0x1E05E: "\u0441",
    0x1E05F: "\u0443",
    0x1E060: "\u0444",
    0x1E061: "\u0445",
    0x1E062: "\u0446",
    0x1E063: "\u0447",
    0x1E064: "\u0448",
    0x1E065: "\u044a",
    0x1E066: "\u044b",
    0x1E067: "\u0491",
    0x1E068: "\u0456",
    0x1E069: "\u0455",
    0x1E06A: "\u045f",
    0x1E06B: "\u04ab",
    0x1E06C: "\ua651",
    0x1E06D: "\u04b1",
}
# Characters Python's version does not assign, with ICU's NFKC_CF mapping.
_NFKC_CF_MAP = {
    0x1C89: "\u1c8a",
    0xA7CB: "\u0264",
    0xA7CC: "\ua7cd",
    0xA7DA: "\ua7db",
    0xA7DC: "\u019b",
    0x10D50: "\U00010d70",
    0x10D51: "\U00010d71",
    0x10D52: "\U00010d72",
    0x10D53: "\U00010d73",
    0x10D54: "\U00010d74",
    0x10D55: "\U00010d75",
    0x10D56: "\U00010d76",
    0x10D57: "\U00010d77",
    0x10D58: "\U00010d78",
    0x10D59: "\U00010d79",
    0x10D5A: "\U00010d7a",
    0x10D5B: "\U00010d7b",
    0x10D5C: "\U00010d7c",
    0x10D5D: "\U00010d7d",
    0x10D5E: "\U00010d7e",
    0x10D5F: "\U00010d7f",
    0x10D60: "\U00010d80",
    0x10D61: "\U00010d81",
    0x10D62: "\U00010d82",
    0x10D63: "\U00010d83",
    0x10D64: "\U00010d84",
    0x10D65: "\U00010d85",
    0x1CCD6: "a",
    0x1CCD7: "b",
    0x1CCD8: "c",
    0x1CCD9: "d",
    0x1CCDA: "e",
    0x1CCDB: "f",
    0x1CCDC: "g",
    0x1CCDD: "h",
    0x1CCDE: "i",
    0x1CCDF: "j",
    0x1CCE0: "k",
    0x1CCE1: "l",
    0x1CCE2: "m",
    0x1CCE3: "n",
    0x1CCE4: "o",
    0x1CCE5: "p",
    0x1CCE6: "q",
    0x1CCE7: "r",
    0x1CCE8: "s",
    0x1CCE9: "t",
    0x1CCEA: "u",
    0x1CCEB: "v",
    0x1CCEC: "w",
    0x1CCED: "x",
    0x1CCEE: "y",
    0x1CCEF: "z",
    0x1CCF0: "0",
    0x1CCF1: "1",
    0x1CCF2: "2",
    0x1CCF3: "3",
    0x1CCF4: "4",
    0x1CCF5: "5",
    0x1CCF6: "6",
    0x1CCF7: "7",
    0x1CCF8: "8",
    0x1CCF9: "9",
    0x1E030: "\u0430",
    0x1E031: "\u0431",
    0x1E032: "\u0432",
    0x1E033: "\u0433",
    0x1E034: "\u0434",
    0x1E035: "\u0435",
    0x1E036: "\u0436",
    0x1E037: "\u0437",
    0x1E038: "\u0438",
    0x1E039: "\u043a",
    0x1E03A: "\u043b",
    0x1E03B: "\u043c",
    0x1E03C: "\u043e",
    0x1E03D: "\u043f",
    0x1E03E: "\u0440",
    0x1E03F: "\u0441",
    0x1E040: "\u0442",
    0x1E041: "\u0443",
    0x1E042: "\u0444",
    0x1E043: "\u0445",
    0x1E044: "\u0446",
    0x1E045: "\u0447",
    0x1E046: "\u0448",
    0x1E047: "\u044b",
    0x1E048: "\u044d",
    0x1E049: "\u044e",
    0x1E04A: "\ua689",
    0x1E04B: "\u04d9",
    0x1E04C: "\u0456",
    0x1E04D: "\u0458",
    0x1E04E: "\u04e9",
    0x1E04F: "\u04af",
    0x1E050: "\u04cf",
    0x1E051: "\u0430",
    0x1E052: "\u0431",
    0x1E053: "\u0432",
    0x1E054: "\u0433",
    0x1E055: "\u0434",
    0x1E056: "\u0435",
    0x1E057: "\u0436",
    0x1E058: "\u0437",
    0x1E059: "\u0438",
    0x1E05A: "\u043a",
    0x1E05B: "\u043b",
    0x1E05C: "\u043e",
    0x1E05D: "\u043f",
    0x1E05E: "\u0441",
    0x1E05F: "\u0443",
    0x1E060: "\u0444",
    0x1E061: "\u0445",
    0x1E062: "\u0446",
    0x1E063: "\u0447",
    0x1E064: "\u0448",
    0x1E065: "\u044a",
    0x1E066: "\u044b",
    0x1E067: "\u0491",
    0x1E068: "\u0456",
    0x1E069: "\u0455",
    0x1E06A: "\u045f",
    0x1E06B: "\u04ab",
    0x1E06C: "\ua651",
    0x1E06D: "\u04b1",
}
# Characters that TensorFlow's lower-casing maps otherwise than Python's `str.lower`.
_LOWER_MAP = {
    0x2C2F: "\u2c2f",
    0xA7C0: "\ua7c0",
    0xA7D0: "\ua7d0",
    0xA7D6: "\ua7d6",
    0xA7D8: "\ua7d8",
    0x10570: "\U00010570",
    0x10571: "\U00010571",
    0x10572: "\U00010572",
    0x10573: "\U00010573",
    0x10574: "\U00010574",
    0x10575: "\U00010575",
    0x10576: "\U00010576",
    0x10577: "\U00010577",
    0x10578: "\U00010578",
    0x10579: "\U00010579",
    0x1057A: "\U0001057a",
    0x1057C: "\U0001057c",
    0x1057D: "\U0001057d",
    0x1057E: "\U0001057e",
    0x1057F: "\U0001057f",
    0x10580: "\U00010580",
    0x10581: "\U00010581",
    0x10582: "\U00010582",
    0x10583: "\U00010583",
    0x10584: "\U00010584",
    0x10585: "\U00010585",
    0x10586: "\U00010586",
    0x10587: "\U00010587",
    0x10588: "\U00010588",
    0x10589: "\U00010589",
    0x1058A: "\U0001058a",
    0x1058C: "\U0001058c",
    0x1058D: "\U0001058d",
    0x1058E: "\U0001058e",
    0x1058F: "\U0001058f",
    0x10590: "\U00010590",
    0x10591: "\U00010591",
    0x10592: "\U00010592",
    0x10594: "\U00010594",
    0x10595: "\U00010595",
}
_NORMALIZATION_MAPS = {"NFC": _NFC_MAP, "NFD": _NFD_MAP, "NFKC": _NFKC_MAP, "NFKD": _NFKD_MAP}


# The characters each table maps, to pass over texts without any quickly.
_MAPPED_CHARACTERS = {
    name: frozenset(map(chr, table))
    for name, table in {**_NORMALIZATION_MAPS, "lower": _LOWER_MAP}.items()
}


def category(character):
    """The general category (`"Lu"`, `"Mn"`, `"Po"`, ...) RE2 gives `character`.

    RE2's `\\p{P}` is Unicode's P; for a punctuation mark Python does not know
    yet this answers `"Po"`, which is all the tokenizer asks (`startswith("P")`).
    """
    found = unicodedata.category(character)
    if found == "Cn":
        return _newer_category(ord(character))
    return found


@functools.cache
def _newer_category(code):
    for name, ranges in _NEWER_CATEGORIES.items():
        if any(first <= code <= last for first, last in ranges):
            return name
    return "Cn"


def normalize(form, text):
    """ICU's (tensorflow-text's `normalize_utf8`) normalization `form` of `text`."""
    table = _NORMALIZATION_MAPS[form]
    if not _MAPPED_CHARACTERS[form].isdisjoint(text):
        text = text.translate(table)
    return unicodedata.normalize(form, text)


def nfkc_casefold(text):
    """ICU's NFKC_Casefold of `text` (tensorflow-text's `case_fold_utf8`): each
    character's NFKC_Casefold mapping, then NFC."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", text.translate(_NFKC_CF_TABLE))


def _nfkc_casefold_character(character):
    code = ord(character)
    if code in _NFKC_CF_MAP:
        return _NFKC_CF_MAP[code]
    if _is_default_ignorable(code):
        return ""
    # Unicode's definition: case folding and NFKC until neither changes anything.
    mapped = unicodedata.normalize("NFD", character).casefold()
    mapped = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", mapped).casefold())
    return "".join(
        part
        for part in unicodedata.normalize("NFKC", mapped)
        if not _is_default_ignorable(ord(part))
    )


class _NFKCCasefoldTable(dict):
    """A `str.translate` table of NFKC_Casefold mappings, each worked out on first sight."""

    def __missing__(self, code):
        self[code] = mapping = _nfkc_casefold_character(chr(code))
        return mapping


_NFKC_CF_TABLE = _NFKCCasefoldTable()


def _is_default_ignorable(code):
    return any(first <= code <= last for first, last in _DEFAULT_IGNORABLE)


def lower(text):
    """TensorFlow's `tf.strings.lower(text, encoding="utf-8")` of a text without NUL."""
    if _MAPPED_CHARACTERS["lower"].isdisjoint(text):
        return text.lower()
    return "".join(_LOWER_MAP.get(ord(character), character.lower()) for character in text)
