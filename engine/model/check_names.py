#!/usr/bin/env python3
"""Checks that engine/model/varq.pml still matches the C code it models.

The model cites the C code in three kinds of comment lines:

  @E FILE NAME                 a var state: NAME's value in FILE's enum must
                               be the model's #define NAME; and every
                               VQ__VAR_* state of that enum must be cited
  @F FILE struct S FIELD       a field: struct S in FILE must declare FIELD,
                               and the model must use FIELD (in its typedef S
                               when it has one)
  @C FILE:LINE FUNC `CODE`     a statement: CODE (whitespace and comments
                               ignored) must occur in the body of FUNC in
                               FILE. LINE is where it was when the model was
                               written; a moved statement is reported, not
                               failed (--update-lines rewrites LINE).

Any mismatch fails (exit 1) with what to revisit, so that a rename or a
changed condition in var.c cannot leave the model checking something else.
Run from anywhere: paths are relative to the repository root.
(VARQ_MODEL_SRC=DIR checks against DIR/engine/... instead.)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "varq.pml")
# The C code: this repository's, or (to try the check itself on an edited
# copy of engine/) the tree named by VARQ_MODEL_SRC.
ROOT = os.environ.get("VARQ_MODEL_SRC") or os.path.normpath(os.path.join(HERE, "..", ".."))


def strip_comments(text):
    """C or Promela text with comments blanked out, newlines kept."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def normalize(text, first_line=1):
    """Whitespace runs collapsed to one space; also the line of each char."""
    out, lines, line, space = [], [], first_line, False
    for ch in text:
        if ch.isspace():
            if ch == "\n":
                line += 1
            space = True
            continue
        if space and out:
            out.append(" ")
            lines.append(line)
        space = False
        out.append(ch)
        lines.append(line)
    return "".join(out), lines


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def function_body(code, name):
    """(body, first line) of the definition of function name, or None."""
    for m in re.finditer(r"^[A-Za-z_][^;{}\n]*?\b%s\s*\(" % re.escape(name), code, re.M):
        close = matching(code, m.end() - 1, "(", ")")
        if close < 0:
            continue
        rest = code[close:].lstrip()
        if not rest.startswith("{"):
            continue  # a prototype
        start = close + (len(code[close:]) - len(rest))
        end = matching(code, start, "{", "}")
        return code[m.start():end], code.count("\n", 0, m.start()) + 1
    return None


def struct_body(code, name):
    m = re.search(r"\bstruct\s+%s\s*\{" % re.escape(name), code)
    if not m:
        return None
    return code[m.end() - 1:matching(code, m.end() - 1, "{", "}")]


def main():
    model_text = open(MODEL).read()
    model_code = strip_comments(model_text)
    sources = {}

    def source(path):
        if path not in sources:
            full = os.path.join(ROOT, path)
            if not os.path.exists(full):
                return None
            sources[path] = strip_comments(open(full).read())
        return sources[path]

    errors, notes, moves, checked = [], [], {}, 0

    # @E: the var states
    cited_states = {}
    for path, name in re.findall(r"@E (\S+) (\w+)", model_text):
        checked += 1
        code = source(path)
        if code is None:
            errors.append("@E %s: no such file" % path)
            continue
        c = re.search(r"\b%s\s*=\s*(\d+)" % name, code)
        p = re.search(r"^#define\s+%s\s+(\d+)" % name, model_text, re.M)
        if not c:
            errors.append("@E %s: %s is not in its enum any more" % (path, name))
        elif not p:
            errors.append("@E: the model has no #define %s" % name)
        elif c.group(1) != p.group(1):
            errors.append("@E %s: %s is %s in C, %s in the model"
                          % (path, name, c.group(1), p.group(1)))
        cited_states.setdefault(path, set()).add(name)
    for path, names in cited_states.items():
        enum = re.search(r"enum\s*\{[^}]*\b%s\b[^}]*\}" % sorted(names)[0], source(path))
        if enum:
            for name in re.findall(r"\b(VQ__VAR_\w+)\s*=", enum.group(0)):
                if name not in names:
                    errors.append("@E %s: the C code has a var state %s that the model "
                                  "does not know" % (path, name))

    # @F: the fields
    for path, struct, field in re.findall(r"@F (\S+) struct (\w+) (\w+)", model_text):
        checked += 1
        code = source(path)
        body = struct_body(code, struct) if code is not None else None
        if body is None:
            errors.append("@F %s: no struct %s" % (path, struct))
            continue
        if not re.search(r"[\s*]%s\s*(\[[^\]]*\]\s*)?[;,]" % re.escape(field), body):
            errors.append("@F %s: struct %s has no field %s any more" % (path, struct, field))
        typedef = re.search(r"\btypedef\s+%s\s*\{([^}]*)\}" % re.escape(struct), model_code)
        where = typedef.group(1) if typedef else model_code
        if not re.search(r"\b%s\b" % re.escape(field), where):
            errors.append("@F: the model does not use %s.%s" % (struct, field))

    # @C: the statements
    for path, line, func, snippet in re.findall(r"@C (\S+?):(\d+) (\w+) `([^`]*)`", model_text):
        checked += 1
        code = source(path)
        found = function_body(code, func) if code is not None else None
        if found is None:
            errors.append("@C %s: no function %s (the model cites it at line %s)"
                          % (path, func, line))
            continue
        body, first = found
        text, lines = normalize(body, first)
        want, _ = normalize(snippet)
        at = text.find(want)
        if at < 0:
            errors.append("@C %s:%s %s: this is not in the C code any more; revisit the "
                          "model's part for it:\n      %s" % (path, line, func, want))
        elif lines[at] != int(line):
            notes.append("%s:%s %s: now at line %d" % (path, line, func, lines[at]))
            moves["@C %s:%s %s `%s`" % (path, line, func, snippet)] = \
                "@C %s:%d %s `%s`" % (path, lines[at], func, snippet)

    if moves and "--update-lines" in sys.argv[1:]:
        for old, new in moves.items():
            model_text = model_text.replace(old, new)
        with open(MODEL, "w") as f:
            f.write(model_text)
        print("model names: %d line numbers updated in %s" % (len(moves), MODEL))
    else:
        for n in notes:
            print("model names: moved (not an error): " + n)
    if errors:
        for e in errors:
            print("model names: MISMATCH " + e, file=sys.stderr)
        print("model names: %d of %d citations of the C code in engine/model/varq.pml do "
              "not match" % (len(errors), checked), file=sys.stderr)
        return 1
    print("model names: %d citations of the C code in engine/model/varq.pml match" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
