"""Regenerate tok_corpus.json (the parity corpus). Run once by hand; the JSON is committed.

Deterministic: fixed seed, hand-written pieces plus seeded random mixtures of them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ENGLISH = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "I'm sure you'll agree: we've done it, they'd said, and she'll know. DON'T SHOUT, it'S FINE.",
    "Mr. Smith went to Washington D.C. on Jan. 5th, 2024 at 3:45 p.m.",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "multiple   spaces    between     words",
    "a",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "x",
    "Capitalized Words In A Title Case Sentence",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #!",
    "snake_case_identifier and camelCaseIdentifier and PascalCase and kebab-case",
    "email: john.doe+tag@example.co.uk, phone: +1 (555) 123-4567",
    "Quotes: \"double\" 'single' `backtick` \u201ccurly\u201d \u2018curly\u2019 \u00abguillemets\u00bb",
    "Ellipsis... and em\u2014dash and en\u2013dash and the end.",
    "Contractions: can't won't shouldn't I'd you're we'll they've o'clock rock'n'roll",
    "Apostrophe edge: 's 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'M 'LL 'D 'x",
]

CODE = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "import numpy as np\n\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)  # (3, 4)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <stdio.h>\nint main(void) {\n    printf(\"hello\\n\");\n    return 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const f = async (a, b) => { await g(a ?? b); return a?.b?.c || null; };",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n",
    "if x == 1 and y != 2 or z >= 3 and w <= 4:\n\tpass\n",
    "    indented with four spaces\n        and eight spaces\n",
    "\t\tindented with two tabs\n\t\t\tthree tabs",
    "x=1;y=2;z=x<<y|x>>1&~y^0xFF",
    "$ ls -la /usr/local/bin | grep -E '^d' > out.txt 2>&1",
    "SELECT u.id, COUNT(*) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 5 ORDER BY n DESC;",
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Test</title></head>\n<body><div class=\"a b\"><p>Hi &amp; bye</p><br/></div></body>\n</html>",
    "<b>bold</b> <i>italic</i> <span style=\"color:red\">red</span> <table><thead><tr><th>h</th></tr></thead></table>",
    "{\"name\": \"bw24\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"gguf\"], \"nested\": {\"a\": 1, \"b\": [true, false, null]}}",
    "[{\"id\":1,\"v\":-2.5e-3},{\"id\":2,\"v\":3.14159}]",
    "https://example.com/path/to/page?query=1&lang=en#section-2",
    "Visit http://www.test.org or ftp://files.example.net/pub/file.tar.gz now",
    "git clone git@github.com:owner/repo.git && cd repo && make -j8",
    "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "# Markdown Title\n\n- item one\n- item two\n\n1. first\n2. second\n\n```python\nprint('hi')\n```\n",
    "| col1 | col2 |\n|------|------|\n| a    | b    |\n",
    "key: value\nlist:\n  - one\n  - two\nnested:\n  inner: 3\n",
]

WHITESPACE = [
    "a\tb\tc",
    "a\t\tb",
    "line1\nline2\nline3",
    "para1\n\npara2\n\n\npara3",
    "crlf\r\nline\r\n",
    "mixed \t \n \r\n  end",
    "\n\n\n\n\n",
    "\t\t\t\t",
    "      ",
    " \n ",
    "word \n",
    "word  \n  word",
    "end with newline\n",
    "\u00a0non-breaking\u00a0space",
    "ideographic\u3000space",
    "thin\u2009space and\u200bzero-width",
    "form\x0cfeed and vertical\x0btab",
    "x" + " " * 17 + "y",
    "\n \n \n",
]

NUMBERS = [
    "0",
    "1234567890",
    "3.14159265358979",
    "-42",
    "1,234,567.89",
    "1e10 2E-5 0x1F 0b1010 0o17",
    "The year 2024 and 19th century, 1st 2nd 3rd 4th",
    "12345678901234567890123456789",
    "Phone 555-0100, zip 90210, pi ~ 3.14",
    "\u0663\u0664\u0665 Arabic-Indic digits, \u0968\u0969 Devanagari digits, \u2163 roman numeral, \u00bd half, \u00b2 squared",
    "version 1.2.3-rc.4+build.567",
]

MULTILINGUAL = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u3072\u3089\u304c\u306a\u3068\u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430? \u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5! \u0393\u03b1\u03b6\u03af\u03b5\u03c2 \u03ba\u03b1\u1f76 \u03bc\u03c5\u03c1\u03c4\u03b9\u1f72\u03c2 \u03b4\u1f72\u03bd \u03b8\u1f70 \u03b2\u03c1\u1ff6 \u03c0\u03b9\u1f70",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u05d6\u05d4\u05d5 \u05d8\u05e7\u05e1\u05d8 \u05d1\u05e2\u05d1\u05e8\u05d9\u05ea.",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0647\u0630\u0627 \u0646\u0635 \u0639\u0631\u0628\u064a\u064c \u0645\u064f\u0634\u064e\u0643\u0651\u064e\u0644.",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u092f\u0939 \u0939\u093f\u0902\u0926\u0940 \u0939\u0948\u0964",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "Cr\u00e8me br\u00fbl\u00e9e, na\u00efve caf\u00e9, se\u00f1or, \u00fcber, \u00e5ngstr\u00f6m, \u0141\u00f3d\u017a, \u0159\u00ed\u0161e",
    "Combining: e\u0301 a\u0308 o\u0302 n\u0303 (decomposed) vs \u00e9 \u00e4 \u00f4 \u00f1 (composed)",
    "Tiếng Việt có dấu: Xin chào thế giới",
    "Mixed \u4e2d\u6587 and English and \u0420\u0443\u0441\u0441\u043a\u0438\u0439 in one line",
    "\u1f00\u03c1\u03c7\u1f74 \u1f26\u03bd \u1f41 \u03bb\u03cc\u03b3\u03bf\u03c2",
    "Math: \u2200x\u2208\u211d, \u2203y: x\u00b2+y\u00b2\u2264r\u00b2 \u21d2 \u222b\u2080\u00b9 f(x)dx \u2248 \u2211\u1d62 a\u1d62",
    "Symbols: \u00a9 \u00ae \u2122 \u20ac \u00a3 \u00a5 \u00a7 \u00b6 \u2020 \u2021 \u2022 \u00b0 \u00b1 \u00d7 \u00f7",
    "Box drawing: \u250c\u2500\u2500\u2510\n\u2502ab\u2502\n\u2514\u2500\u2500\u2518",
    "Fullwidth: \uff21\uff22\uff23\uff11\uff12\uff13\uff01",
]

EMOJI = [
    "\U0001f600 \U0001f602 \U0001f60d \U0001f44d \U0001f680 \U0001f525",
    "Family: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 done",
    "Skin tones: \U0001f44b\U0001f3fb \U0001f44b\U0001f3fc \U0001f44b\U0001f3fd \U0001f44b\U0001f3fe \U0001f44b\U0001f3ff",
    "Flags: \U0001f1fa\U0001f1f8 \U0001f1ef\U0001f1f5 \U0001f1e9\U0001f1ea \U0001f3f4\u200d\u2620\ufe0f",
    "ZWJ: \U0001f469\u200d\U0001f4bb \U0001f9d1\U0001f3fd\u200d\U0001f680 \U0001f3f3\ufe0f\u200d\U0001f308 \u2764\ufe0f\u200d\U0001f525",
    "Keycaps: 1\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3",
    "\U0001f600\U0001f600\U0001f600\U0001f600\U0001f600",
    "text\U0001f389text\U0001f389",
    "Hearts \u2764 \u2764\ufe0f \U0001f9e1 \U0001f49b \U0001f49a \U0001f499 \U0001f49c",
    "Old symbols \u2600 \u2601 \u260e \u2714 \u2716 \u2728",
]

RUNS = [c * 100 for c in "aZ0 .-=\n\t_*#x"] + [
    "\u4e00" * 100,
    "\U0001f600" * 50,
    "ab" * 60,
    "\u00e9" * 100,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa b",
]

# Special-token strings of the three models (and look-alikes) inside ordinary text.
SPECIAL = [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>",
    "<|file_sep|>path/to/file.py\n<|repo_name|>owner/repo",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<repo_name>bw24<file_sep>README.md<filename>x<gh_stars>10",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>",
    "<eos><pad><unk><mask>",
    "<unused0><unused42>[multimodal]<start_of_image><end_of_image>",
    "<b>not special?</b> <thead> </tfoot>",
    "< |im_start| > <|im_start <im_start|> <|IM_START|>",
    "almost<|im_end|almost|>",
    "<s></s><unk>[INST] hello [/INST]",
    "<|endoftext|><|endoftext|><|endoftext|>",
    " <|im_start|> spaced <|im_end|> ",
    "a<|im_start|>b<|im_end|>c<|endoftext|>d",
    "Gemma: <start_of_turn>model\n<start_of_image>\n\n\n<end_of_turn>\n",
    "<0x41><0x0A> byte-token look-alikes",
    "\u2581leading\u2581block\u2581chars\u2581",
]


def _mixtures(rng: random.Random, pools: list[list[str]], n: int) -> list[str]:
    flat = [s for pool in pools for s in pool]
    seps = ["", " ", "\n", "  ", "\t", "\n\n", " \n"]
    out = []
    for _ in range(n):
        k = rng.randint(2, 4)
        out.append("".join(rng.choice(flat) + rng.choice(seps) for _ in range(k)))
    return out


def _char_soup(rng: random.Random, n: int) -> list[str]:
    alphabet = (
        "abcXYZ019 \t\n\r.,;:'\"!?()[]{}<>|/\\_-+=*&^%$#@~`"
        "\u00e9\u00df\u0416\u03a9\u05d0\u0639\u4e2d\u3042\ud55c\u2581\u00a0\u3000"
        "\U0001f600\U0001f44d\U0001f3fd\u200d\ufe0f"
    )
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def build() -> list[str]:
    rng = random.Random(24)
    pools = [ENGLISH, CODE, WHITESPACE, NUMBERS, MULTILINGUAL, EMOJI, RUNS, SPECIAL]
    corpus = [s for pool in pools for s in pool]
    corpus += _mixtures(rng, pools, 120)
    corpus += _char_soup(rng, 80)
    seen: set[str] = set()
    return [s for s in corpus if not (s in seen or seen.add(s))]


if __name__ == "__main__":
    out = Path(__file__).with_name("tok_corpus.json")
    corpus = build()
    out.write_text(json.dumps(corpus, ensure_ascii=True, indent=0) + "\n")
    print(f"wrote {len(corpus)} strings to {out}")
