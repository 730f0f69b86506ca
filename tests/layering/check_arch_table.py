"""docs/architecture.md's library tables against CMake: for every row `cubridge_X`, the CuBridge
libraries its "depends on" column names are exactly the ones CMake links it to directly
(target_link_libraries, PUBLIC or PRIVATE). Third-party names in the column are not checked.

    python3 check_arch_table.py SOURCE_ROOT
"""
import os
import re
import sys

root = sys.argv[1]


def cmake_deps():
    deps = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        if "CMakeLists.txt" not in files:
            continue
        text = open(os.path.join(folder, "CMakeLists.txt")).read()
        text = re.sub(r"#[^\n]*", "", text)
        for m in re.finditer(r"target_link_libraries\(\s*(\w+)([^)]*)\)", text):
            name = m.group(1)
            found = set(re.findall(r"\bcubridge_\w+", m.group(2))) - {name}
            deps.setdefault(name, set()).update(found)
    return deps


def table_rows():
    text = open(os.path.join(root, "docs", "architecture.md")).read()
    rows = {}
    for m in re.finditer(r"^\| `(cubridge_\w+)`[^|]*\|[^|]*\|([^|]*)\|", text, re.M):
        rows[m.group(1)] = m.group(2)
    return rows


deps = cmake_deps()
rows = table_rows()
known = {n[len("cubridge_"):] for n in set(deps) | set(rows)}
failures = []
for lib, column in rows.items():
    words = set(re.findall(r"[A-Za-z_]+", column))
    named = {"cubridge_" + w for w in words if w in known and w != "httplib"}
    linked = deps.get(lib, set()) - {"cubridge_httplib"}  # cpp-httplib's import target
    if named != linked:
        failures.append(f"{lib}: the table says {sorted(n[9:] for n in named) or '-'}, CMake links "
                        f"{sorted(n[9:] for n in linked) or '-'}")
if not rows:
    failures.append("no library rows found in docs/architecture.md")
for f in failures:
    print(f)
print(f"architecture table: {len(rows)} libraries, {len(failures)} disagreeing with CMake")
sys.exit(1 if failures else 0)
