#!/usr/bin/env python3
"""Checks the Markdown documentation: README.md and docs/**/*.md.

1. Links: every relative link ([text](path), ![alt](path), [ref]: path)
   names a file or directory that exists, and a #anchor, in the same page
   or another .md page, names one of that page's headings (GitHub's slugs:
   lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for
   repeats) or an <a name=...> / id=... in it. Links with a scheme
   (https:, mailto:) are not followed.
2. C code: every ```c block compiles against the public headers, with
   cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -Iinclude. <varq/varq.h>
   and the usual C headers are included first. A block that defines
   something at file scope (a function, main, a type, an #include) is a
   translation unit as it is; a block of statements only is put in a
   function body, where unused variables are allowed. `#line` makes the
   compiler's messages name the Markdown file and its line. A block whose
   info string is "c fragment" (```c fragment) is not compiled: for
   excerpts that need context they do not show.

Usage: scripts/check_docs.py [FILE.md ...]   (default: README.md docs/**/*.md)
Prints one line per problem, "FILE:LINE: what", and a summary; exits 1 when
there is any problem. Needs only Python 3's standard library and a C
compiler (CC, else cc).
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"\sid\s*=\s*[\"']([^\"']+)[\"']", re.I)

C_PRELUDE = """#include <varq/varq.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
"""
C_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]
# a block of statements shown on their own may declare what it does not use
STATEMENT_FLAGS = ["-Wno-unused-variable", "-Wno-unused-but-set-variable"]


def markdown_files(args):
    if args:
        return args
    files = [os.path.join(ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return [f for f in files if os.path.isfile(f)]


def split_blocks(lines):
    """The page's fenced code blocks as (info, first line number, lines), and
    the text lines outside them as (line number, text)."""
    blocks, text = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            text.append((i + 1, lines[i]))
            i += 1
            continue
        fence, info = m.group(2), m.group(3).strip()
        body, j = [], i + 1
        while j < len(lines):
            c = FENCE.match(lines[j])
            if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) and not c.group(3).strip():
                break
            body.append(lines[j])
            j += 1
        blocks.append((info, i + 2, body))
        i = j + 1
    return blocks, text


def strip_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def slugify(heading):
    """GitHub's anchor for a heading's text."""
    t = heading.strip()
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)  # links: their text
    t = re.sub(r"<[^>]+>", "", t)  # inline HTML
    t = t.replace("`", "")
    t = t.lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


_anchor_cache = {}


def anchors_of(path):
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    _, text = split_blocks(lines)
    anchors, seen = set(), {}
    prev = None
    for _, line in text:
        m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        setext = prev is not None and prev.strip() and re.match(r"^\s{0,3}(=+|-+)\s*$", line)
        heading = m.group(2) if m else (prev if setext else None)
        if heading is not None:
            slug = slugify(heading)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
        for a in HTML_ANCHOR.findall(line) + HTML_ID.findall(line):
            anchors.add(a)
        prev = line
    _anchor_cache[path] = anchors
    return anchors


def check_links(path, text, problems):
    rel = os.path.relpath(path, ROOT)
    for num, line in text:
        line = strip_code_spans(line)
        targets = INLINE_LINK.findall(line)
        m = REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
                continue  # https:, mailto: ...: not followed
            file_part, _, anchor = target.partition("#")
            if file_part:
                base = ROOT if file_part.startswith("/") else os.path.dirname(path)
                dest = os.path.normpath(os.path.join(base, file_part.lstrip("/")))
                if not os.path.exists(dest):
                    problems.append("%s:%d: link to %s: no such file" % (rel, num, target))
                    continue
            else:
                dest = path
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                if anchor not in anchors_of(dest):
                    problems.append(
                        "%s:%d: link to %s: %s has no heading with anchor #%s"
                        % (rel, num, target, os.path.relpath(dest, ROOT), anchor)
                    )


def is_translation_unit(body):
    """Whether a block defines things at file scope (so it is compiled as
    it is) rather than being statements (put in a function)."""
    for line in body:
        if re.match(r"^(#\s*(include|define)|static\s|typedef\s|struct\s|enum\s|union\s|extern\s)", line):
            return True
        # a function definition or declaration starting in column 0
        if re.match(r"^[A-Za-z_][\w\s\*]*\b[A-Za-z_]\w*\s*\([^;]*$", line) and not re.match(
            r"^(if|for|while|switch|return)\b", line
        ):
            return True
    return False


def check_c_blocks(path, blocks, problems, counts):
    rel = os.path.relpath(path, ROOT)
    cc = shlex.split(os.environ.get("CC", "cc"))
    for info, first, body in blocks:
        words = info.split()
        if not words or words[0].lower() != "c":
            continue
        if "fragment" in words[1:]:
            counts["fragments"] += 1
            continue
        counts["compiled"] += 1
        flags = list(C_FLAGS)
        src = C_PRELUDE
        if is_translation_unit(body):
            src += '#line %d "%s"\n' % (first, rel) + "\n".join(body) + "\n"
        else:
            flags += STATEMENT_FLAGS
            src += "void vq_doc_block(void);\nvoid vq_doc_block(void)\n{\n"
            src += '#line %d "%s"\n' % (first, rel) + "\n".join(body) + "\n}\n"
        with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
            f.write(src)
            name = f.name
        try:
            r = subprocess.run(
                cc + flags + ["-I", os.path.join(ROOT, "include"), name],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
        finally:
            os.unlink(name)
        if r.returncode != 0:
            out = r.stderr.strip().replace(name, rel)
            problems.append(
                "%s:%d: the ```c block does not compile (tag it ```c fragment if it is an "
                "excerpt):\n%s" % (rel, first - 1, "\n".join("    " + l for l in out.split("\n")))
            )


def main():
    files = markdown_files(sys.argv[1:])
    problems = []
    counts = {"compiled": 0, "fragments": 0}
    for path in files:
        path = os.path.abspath(path)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        blocks, text = split_blocks(lines)
        check_links(path, text, problems)
        check_c_blocks(path, blocks, problems, counts)
    for p in problems:
        print(p)
    print(
        "docs: %d Markdown files, %d C blocks compiled, %d fragments skipped: %d problem%s"
        % (len(files), counts["compiled"], counts["fragments"], len(problems), "" if len(problems) == 1 else "s")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
