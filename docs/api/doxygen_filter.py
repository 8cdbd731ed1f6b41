#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for varq's public headers (docs/api/Doxyfile.in).

The headers are written in the project's plain style: a /* */ comment
directly above a declaration documents it, a /* */ comment after a member
or value on its line documents that member, and the comment at the top of
the file describes the file. Doxygen reads only /** and /**< comments, so
this filter rewrites them on the way in, and the headers stay as they are:

- the file's head comment becomes /** ... @file */;
- a comment whose last line is directly followed (no blank line) by a
  declaration becomes /** ... */; when it is followed by several
  declarations in a row, none with a comment of its own ("Counts, for
  callers that walk a program." above vq_program_nblocks, _nops and
  _nvars), they become a member group: "/**@{*/" in front of the comment
  and "/**@}*/" on the line after the last, and Doxygen gives each the comment's text
  (DISTRIBUTE_GROUP_DOC);
- a comment after code on its line becomes /**< ... */ (a struct member,
  an enum value, a #define's value);
- in the comments it converts, the characters Doxygen would take for
  commands or markup (x@GRAD, <y>.w, \\, #word, &) are escaped.

Every line stays on its line, so Doxygen's warnings name the header's real
line numbers. Usage: doxygen_filter.py HEADER (writes the result to stdout).
"""
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def find_comments(text):
    """(start, end) offsets of every /* */ comment, skipping strings."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def escape_text(t):
    t = t.replace("\\", "\\\\")
    t = t.replace("@", "\\@")
    t = t.replace("<", "\\<").replace(">", "\\>")
    t = t.replace("&", "\\&")
    t = re.sub(r"#(?=[A-Za-z_])", r"\\#", t)
    t = t.replace("%", "\\%")
    return t


def escape(body):
    """Escapes Doxygen's command and markup characters in comment text,
    except in `code spans`, "double quotes" and indented code lines
    (Markdown code blocks: 4 or more spaces after the comment's " * "),
    which Doxygen shows as they are."""
    out = []
    for k, line in enumerate(body.split("\n")):
        m = re.match(r"(\s*\*?)(.*)", line) if k else re.match(r"()(.*)", line)
        lead, rest = m.group(1), m.group(2)
        if k and rest.startswith("     "):
            out.append(line)
            continue
        parts = rest.split("`")
        for i in range(0, len(parts), 2):
            # Doxygen takes text in double quotes as it is: "x@GRAD"
            quoted = parts[i].split('"')
            for j in range(0, len(quoted), 2):
                quoted[j] = escape_text(quoted[j])
            parts[i] = '"'.join(quoted)
        out.append(lead + "`".join(parts))
    return "\n".join(out)


def following_declarations(lines, first):
    """The top-level declarations that start at line index `first` and run
    on without a blank line or a comment line: a list of (first line index,
    text, last line index)."""
    decls, depth, cur, cur_line = [], 0, [], None
    i = first
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if depth == 0 and not cur and (not s or s.startswith(("/*", "//", "}"))):
            break
        if depth == 0 and not cur and s.startswith("#"):
            if re.match(r"#\s*define\b", s):
                # a macro: up to the last line of its continuation
                j = i
                while lines[j].rstrip().endswith("\\") and j + 1 < len(lines):
                    j += 1
                decls.append((i, " ".join(lines[i : j + 1]), j))
                i = j + 1
                continue
            if re.match(r"#\s*(if|ifdef|ifndef|else|elif|endif|include)\b", s):
                break
        if not cur:
            cur_line = i
        cur.append(line)
        code = re.sub(r"/\*.*?\*/", "", line)
        depth += code.count("{") - code.count("}")
        if depth == 0 and code.rstrip().endswith(";") and not s.startswith("#"):
            decls.append((cur_line, " ".join(cur), i))
            cur = []
        i += 1
    return decls


def convert(text):
    comments = find_comments(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(off):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= off:
                lo = mid
            else:
                hi = mid - 1
        return lo

    lines = text.split("\n")
    edits = []  # (start, end, replacement)
    closers = set()  # lines that start with the end of a member group
    for k, (a, b) in enumerate(comments):
        body = text[a + 2 : b - 2]
        la, lb = line_of(a), line_of(b - 1)
        before = text[line_starts[la] : a]
        after = text[b : line_starts[lb + 1] - 1 if lb + 1 < len(line_starts) else len(text)]
        if body.startswith("*") or body.startswith("!"):
            continue  # already a Doxygen comment
        if k == 0 and not text[:a].strip():
            edits.append((a, b, "/**" + escape(body) + " @file */"))
            continue
        if before.strip():
            # a comment after code on its line: a member's, a value's,
            # a #define's; not one inside a macro's continuation lines
            if before.rstrip().endswith("\\") or after.rstrip().endswith("\\"):
                continue
            if re.match(r"\s*#\s*(include|if|ifdef|ifndef|endif|else|undef)\b", before):
                continue
            edits.append((a, b, "/**<" + escape(body) + "*/"))
            continue
        if after.strip():
            continue  # code after the comment on its last line: leave it
        decls = following_declarations(lines, lb + 1)
        if not decls:
            continue  # a section heading or a note: not any declaration's
        if len(decls) > 1 and not any("/*" in d[1] for d in decls[1:]):
            # one comment for several declarations: a member group, whose
            # first member's text Doxygen gives to all (DISTRIBUTE_GROUP_DOC)
            edits.append((a, b, "/**@{*/ /**" + escape(body) + "*/"))
            # closed at the start of the line after the run, not at the
            # end of its last line, which may be a macro's (and so in it)
            closers.add(decls[-1][2] + 1)
        else:
            edits.append((a, b, "/**" + escape(body) + "*/"))
    out, at = [], 0
    for a, b, rep in sorted(edits):
        out.append(text[at:a])
        out.append(rep)
        at = b
    out.append(text[at:])
    result = "".join(out).split("\n")
    # the edits keep every newline, so line indices still match
    for li in closers:
        if li < len(result):
            result[li] = "/**@}*/" + result[li]
        else:
            result.append("/**@}*/")
    return "\n".join(result)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    sys.stdout.write(convert(text))


if __name__ == "__main__":
    main()
