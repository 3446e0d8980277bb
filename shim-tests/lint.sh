#!/usr/bin/env bash
# Lint for the shim tests, run first by run.sh: exits 1 naming file:line for each of
#   1. a check whose condition goes on past `&&`, `||` or `|`, e.g. `check D [ A ] && [ B ]`:
#      bash parses that as `(check D [ A ]) && [ B ]`, ok or fail comes from A alone, and B
#      runs after the verdict. Give one condition: `check D '[ A ] && [ B ]'` (see lib.sh).
#   2. `shim env VAR=...`: settings after shim come after DROPBEHIND_TEST_FORCE and beat it;
#      write `VAR=... shim CMD`.
#   3. a preload set by hand (LD_PRELOAD=...) instead of through shim/"${SHIM[@]}" (which
#      honour DROPBEHIND_TEST_LIB and DROPBEHIND_TEST_FORCE), unless the line says why with
#      a comment containing "own preload:".
#   lint.sh [FILE...]   (default: every shim-tests/*.sh but lib.sh and lint.sh)
# Before the files it lints a few known-bad and known-good snippets, so a lint that stopped
# catching the old pattern fails too.
here=$(cd "$(dirname "$0")" && pwd)
if [ $# = 0 ]; then
    set -- $(ls "$here"/*.sh | grep -v -e '/lib\.sh$' -e '/lint\.sh$')
fi
exec python3 - "$@" <<'PY'
import re, sys

OPS = ["&&", "||", ";;", "|&", "|", "&", ";", "(", ")", "\n"]
START_WORDS = {"then", "do", "else", "elif", "if", "while", "until", "!", "{", "time"}


class Scanner:
    """Just enough of a shell tokenizer: words (quotes, $(...), ${...}, `...` kept inside
    the word), control operators, comments, line continuations and here-documents."""

    def __init__(self, src):
        self.s, self.i, self.line = src, 0, 1
        self.heredocs = []
        self.substs, self.depth = [], 0  # outermost $(...) bodies: (start, end, line)

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def adv(self, k=1):
        for _ in range(k):
            if self.i < len(self.s):
                if self.s[self.i] == "\n":
                    self.line += 1
                self.i += 1

    def skip_single(self):  # at the opening '
        self.adv()
        while self.peek() and self.peek() != "'":
            self.adv()
        self.adv()

    def skip_ansi(self):  # at $'
        self.adv(2)
        while self.peek() and self.peek() != "'":
            self.adv(2 if self.peek() == "\\" else 1)
        self.adv()

    def skip_double(self):  # at the opening "
        self.adv()
        while self.peek() and self.peek() != '"':
            c = self.peek()
            if c == "\\":
                self.adv(2)
            elif c == "$" and self.peek(1) in "({":
                self.skip_dollar()
            elif c == "`":
                self.skip_backtick()
            else:
                self.adv()
        self.adv()

    def skip_backtick(self):
        self.adv()
        while self.peek() and self.peek() != "`":
            self.adv(2 if self.peek() == "\\" else 1)
        self.adv()

    def skip_dollar(self):  # at $( or ${: to the matching close, quotes respected
        close = ")" if self.peek(1) == "(" else "}"
        opener = "(" if close == ")" else "{"
        record = close == ")" and self.peek(2) != "(" and self.depth == 0
        self.adv(2)
        start, line = self.i, self.line
        self.depth += 1
        depth = 1
        while self.peek() and depth:
            c = self.peek()
            if c == "\\":
                self.adv(2)
            elif c == "'" and close == ")":
                self.skip_single()
            elif c == "$" and self.peek(1) == "'":
                self.skip_ansi()
            elif c == '"':
                self.skip_double()
            elif c == "`":
                self.skip_backtick()
            elif c == "$" and self.peek(1) in "({":
                self.skip_dollar()
            else:
                if c == opener:
                    depth += 1
                elif c == close:
                    depth -= 1
                self.adv()
        self.depth -= 1
        if record:
            self.substs.append((start, self.i - 1, line))

    def skip_heredoc_bodies(self):
        for delim, strip in self.heredocs:
            while self.peek():
                end = self.s.find("\n", self.i)
                end = len(self.s) if end < 0 else end
                text = self.s[self.i:end]
                self.adv(end - self.i + 1)
                if (text.lstrip("\t") if strip else text) == delim:
                    break
        self.heredocs = []

    def tokens(self):
        while self.i < len(self.s):
            c = self.peek()
            if c == "\\" and self.peek(1) == "\n":
                self.adv(2)
                continue
            if c in " \t":
                self.adv()
                continue
            if c == "#":
                while self.peek() and self.peek() != "\n":
                    self.adv()
                continue
            line = self.line
            if c == "\n":
                self.adv()
                yield ("op", "\n", line, "\n")
                if self.heredocs:
                    self.skip_heredoc_bodies()
                continue
            if self.s.startswith("<<", self.i) and not self.s.startswith("<<<", self.i):
                self.adv(2)
                strip = self.peek() == "-"
                if strip:
                    self.adv()
                while self.peek() in " \t":
                    self.adv()
                start = self.i
                while self.peek() and self.peek() not in " \t\n;|&()<>":
                    self.adv()
                self.heredocs.append((re.sub(r"[\"'\\]", "", self.s[start:self.i]), strip))
                yield ("word", "<<heredoc", line, self.s[start:self.i])
                continue
            op = next((o for o in OPS if self.s.startswith(o, self.i)), None)
            if op and not (op == "&" and self.peek(1) == ">"):
                self.adv(len(op))
                yield ("op", op, line, op)
                continue
            start, text = self.i, ""
            while self.peek():
                c = self.peek()
                if c in " \t\n;|()":
                    break
                if c == "&":
                    if self.i > start and self.s[self.i - 1] in "<>" or self.peek(1) == ">":
                        text += c
                        self.adv()
                        continue
                    break
                if c == "'":
                    self.skip_single(); text += "Q"
                elif c == "$" and self.peek(1) == "'":
                    self.skip_ansi(); text += "Q"
                elif c == '"':
                    self.skip_double(); text += "Q"
                elif c == "$" and self.peek(1) in "({":
                    at = self.i
                    self.skip_dollar()
                    text += "S" if self.s[at + 1] == "(" else self.s[at:self.i]
                elif c == "`":
                    self.skip_backtick(); text += "S"
                elif c == "\\":
                    text += self.peek(1); self.adv(2)
                elif c in "<>" and self.peek(1) == "(":  # process substitution
                    self.skip_dollar(); text += "S"  # skips "<(" like "$(" 
                else:
                    text += c; self.adv()
            yield ("word", text, line, self.s[start:self.i])


def lint(name, src, first_line=1, lines=None):
    nested, mine = [], []
    lines = lines or src.split("\n")
    sc = Scanner(src)
    sc.line = first_line
    toks = list(sc.tokens())
    for start, end, line in sc.substs:
        nested += lint(name, src[start:end], line, lines)
    at_start, in_check, check_line = True, False, 0
    prev_word = None
    for kind, text, line, raw in toks:
        if in_check:
            if kind == "op":
                if text in ("&&", "||", "|", "|&"):
                    mine.append((check_line, f"check's condition goes on past `{text}` "
                                     "(write one condition: check DESC '[ A ] && [ B ]')"))
                in_check = False
                at_start = True
            continue
        if kind == "word" and re.search(r"(^|[^A-Za-z0-9_])LD_PRELOAD=", text) \
                and "own preload:" not in lines[line - 1]:
            mine.append((line, "LD_PRELOAD set by hand: use shim or \"${SHIM[@]}\" "
                             "(or say why with a comment containing 'own preload:')"))
        if kind == "op":
            at_start, prev_word = True, None
            continue
        if prev_word in ("shim", '"${SHIM[@]}"') and raw == "env":
            mine.append((line, "`shim env VAR=...` beats DROPBEHIND_TEST_FORCE: write VAR=... shim CMD"))
        prev_word = raw
        if not at_start:
            continue
        if text in START_WORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=", text):
            continue
        at_start = False
        if text == "check":
            in_check, check_line = True, line
    return nested + [f"{name}:{l}: {m}" for l, m in mine]


SELF_TEST_BAD = [
    'check "d" [ "$a" = 1 ] && [ "$b" = 2 ]',
    'check "d" [ $rc = 2 ] && grep -q "$var" "$d/err"',
    'check "desc ($(grep -o \'x.*\' "$f"))" grep -q a f || true',
    "check \"d\" \\\n    [ \"$s\" -le 2048 ] && [ \"$o\" -le 2048 ]",
    'if true; then check "d" [ 1 = 1 ] && [ 1 = 2 ]; fi',
    'x=1 check d true | cat',
    'out=$(shim env DROPBEHIND_STATS=/tmp/s cat f)',
    'b=$(LD_PRELOAD="$LIB" bash -c "$cmd")',
]
SELF_TEST_GOOD = [
    'check "d" \'[ "$a" = 1 ] && [ "$b" = 2 ]\'',
    'check "d ($(grep -o \'a && b\' f))" grep -q x f',
    '[ -n "$x" ] || check "d" [ 1 = 1 ]',
    'if x; then skip "y"\nelse check "d" [ "$b" = True ]; fi',
    "check \"python\" python3 -c 'a=1 && 2\nprint(a|3)' \"$out\"",
    'cat <<EOF\ncheck d [ 1 ] && [ 2 ]\nEOF\ncheck d true',
    'out=$(LD_PRELOAD="$LIB:$LIB" cat f)  # own preload: the library named twice',
    'DROPBEHIND_STATS=/tmp/s shim cat f; check "d" true',
]
broken = [s for s in SELF_TEST_BAD if not lint("self-test", s)]
broken += [s for s in SELF_TEST_GOOD if lint("self-test", s)]
if broken:
    print("lint.sh: the lint itself is broken; misjudged:", *broken, sep="\n  ")
    sys.exit(1)

problems = []
for path in sys.argv[1:]:
    with open(path) as f:
        problems += lint(path, f.read())
for p in problems:
    print("lint: " + p)
if problems:
    print(f"lint: {len(problems)} problem(s) in shim-tests")
    sys.exit(1)
PY
