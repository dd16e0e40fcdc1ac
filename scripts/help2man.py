#!/usr/bin/env python3
"""Writes a tool's man page from its --help, so the two never disagree.

  help2man.py TOOL NAME VERSION SUMMARY OUTPUT
  help2man.py --variables SLUICE_INFO VERSION OUTPUT   sluice(7): every SLUICE_* variable


The --help layout it reads: "usage:" lines, a description paragraph, then sections, each a
line at column 0 ending in ":" ("options:", "tests (...):"), whose entries are two-space
indented "TERM  text" lines (deeper-indented lines continue the text). An "examples:"
section is printed as it is.
"""
import re
import subprocess
import sys


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text[:1] in (".", "'") else text


def parse(help_text):
    lines = help_text.rstrip("\n").split("\n")
    usage, desc, sections = [], [], []
    i = 0
    while i < len(lines) and (lines[i].startswith("usage:") or (usage and lines[i].startswith("      "))):
        usage.append(lines[i][len("usage:"):].strip() if lines[i].startswith("usage:") else lines[i].strip())
        i += 1
    for line in lines[i:]:
        header = re.match(r"^(\w[\w ]*?)(?: \((.*)\))?:$", line)
        if header:
            sections.append({"title": header.group(1), "note": header.group(2), "lines": []})
        elif sections:
            sections[-1]["lines"].append(line)
        else:
            desc.append(line)
    return usage, desc, sections


def paragraphs(lines):
    out, para = [], []
    for l in lines + [""]:
        if l.strip():
            para.append(roff(l.strip()))
        elif para:
            out += [".PP"] + para
            para = []
    return out


def section(s):
    out = [".SH " + s["title"].upper()]
    if s["note"]:
        out += [".PP", roff(s["note"][0].upper() + s["note"][1:]) + "."]
    body = list(s["lines"])
    while body and not body[-1].strip():
        body.pop()
    if s["title"] == "examples":
        return out + [".PP", ".nf"] + [roff(l.strip()) for l in body if l.strip()] + [".fi"]
    items, text = [], []
    for l in body:
        m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", l)
        if m and not l.startswith("   "):
            if m.group(2) is None and not items:
                text.append(l)
                continue
            items.append([m.group(1), [m.group(2) or ""]])
        elif items and l.startswith("   ") and l.strip():
            items[-1][1].append(l.strip())
        else:
            text.append(l)
    for term, lines in items:
        out += [".TP", ".B " + roff(term), roff(" ".join(x for x in lines if x))]
    return out + paragraphs(text)


TOOLS = ("sluice-run", "sluice-info", "sluice-stats", "sluice-perf")
ENVIRONMENT = [".SH ENVIRONMENT", ".PP",
               roff("Every Sluice program reads the SLUICE_* variables, each listed with its type, "
                    "default and meaning in ") + "\\fBsluice\\fR(7)" +
               roff("; sluice-info -c -f prints their current values. UCX's own UCX_* variables "
                    "apply too. sluice-run passes the launcher's SLUICE_* and UCX_* variables to "
                    "every rank, and sets SLUICE_RANK, SLUICE_SIZE, SLUICE_LOCAL_RANK, SLUICE_BOOT, "
                    "SLUICE_BOOT_ADDR and SLUICE_BOOT_TOKEN for each.")]


def see_also(name, section_no):
    pages = ["\\fB%s\\fR(1)" % t for t in TOOLS if t != name]
    if section_no == 1:
        pages.append("\\fBsluice\\fR(7)")
    return [".SH SEE ALSO", ", ".join(pages) + "; the documentation under share/doc/sluice."]


def tool_page(tool, name, version, summary):
    help_text = subprocess.run([tool, "--help"], capture_output=True, text=True, check=True).stdout
    usage, desc, sections = parse(help_text)
    out = ['.TH %s 1 "" "Sluice %s" "Sluice manual"' % (name.upper(), version), ".SH NAME",
           roff("%s \\- %s" % (name, summary)).replace("\\e\\-", "\\-"), ".SH SYNOPSIS", ".nf"]
    out += [roff(u) for u in usage] + [".fi", ".SH DESCRIPTION"] + paragraphs(desc)
    for s in sections:
        out += section(s)
    return out + ENVIRONMENT + see_also(name, 1)


def variables_page(sluice_info, version):
    """sluice(7), from the table `sluice-info -c --markdown` prints (docs/configuration.md's)."""
    table = subprocess.run([sluice_info, "-c", "--markdown"], capture_output=True, text=True, check=True).stdout
    out = ['.TH SLUICE 7 "" "Sluice %s" "Sluice manual"' % version, ".SH NAME",
           "sluice \\- the environment variables of Sluice programs", ".SH DESCRIPTION", ".PP",
           roff("Every variable is read once, when a program creates its Sluice context; a value that "
                "does not parse or is out of range stops start-up with a message naming it. Sizes take "
                "K, M, G (powers of 1024); durations ns, us, ms, s, m. sluice-info -c -f prints them "
                "with their current values."), ".SH ENVIRONMENT"]
    for row in table.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]
        if len(cells) != 5 or not cells[0].startswith("`SLUICE_"):
            continue
        name, component, kind, default, doc = (c.replace("\\|", "|").strip("`") for c in cells)
        out += [".TP", ".B " + roff(name),
                roff("%s (%s; default: %s) %s" % (kind, component, default or "empty", doc))]
    return out + see_also("sluice", 7)


def main():
    if sys.argv[1] == "--variables":
        sluice_info, version, output = sys.argv[2:5]
        out = variables_page(sluice_info, version)
    else:
        tool, name, version, summary, output = sys.argv[1:6]
        out = tool_page(tool, name, version, summary)
    with open(output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
