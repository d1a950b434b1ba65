#!/usr/bin/env python3
"""The layering of include/dcomm/ (docs/architecture.md), checked from the #include lines:

- each layer includes only itself and the layers below it;
- the simulator (sim/) and the algorithms' schedule data reach no transport and no bootstrap,
  so dcomm-sim builds without either;
- algo/ includes no transport header itself: algorithms see peers through prims/;
- no header is longer than MAX_LINES (files stay readable in one sitting).

Prints every violation with the file and the include that breaks the rule; exits 1 if any.
"""
import os
import re
import sys

LAYERS = ["core", "bootstrap", "topo", "transport", "reduce", "prims", "algo", "sim", "comm", "adapter"]
MAX_LINES = 520
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]dcomm/([a-z_]+)/([^">]+)[">]', re.M)


def main(root):
    base = os.path.join(root, "include", "dcomm")
    includes, lines = {}, {}
    for layer in os.listdir(base):
        folder = os.path.join(base, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in LAYERS:
            print(f"include/dcomm/{layer}/: not a known layer (add it to LAYERS in order)")
            return 1
        for name in os.listdir(folder):
            with open(os.path.join(folder, name)) as f:
                text = f.read()
            key = f"{layer}/{name}"
            includes[key] = [f"{m.group(1)}/{m.group(2)}" for m in INCLUDE.finditer(text)]
            lines[key] = text.count("\n")
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    bad = []
    for f, incs in sorted(includes.items()):
        layer = f.split("/")[0]
        for i in incs:
            if i not in includes:
                bad.append(f"{f}: includes {i}, which does not exist")
            elif rank[i.split("/")[0]] > rank[layer]:
                bad.append(f"{f}: includes {i}, a higher layer")
            elif layer == "algo" and i.startswith("transport/"):
                bad.append(f"{f}: includes {i}: algorithms reach peers through prims/, not a transport")

    def reach(f, seen):
        for i in includes.get(f, []):
            if i not in seen:
                seen.add(i)
                reach(i, seen)
        return seen

    for f in sorted(includes):
        if f.startswith("sim/") or f == "algo/schedule.hpp":
            pulled = sorted(i for i in reach(f, set()) if i.split("/")[0] in ("transport", "bootstrap"))
            if pulled:
                bad.append(f"{f}: reaches {', '.join(pulled)}; the simulator builds without transports")
    for f, n in sorted(lines.items()):
        if n > MAX_LINES:
            bad.append(f"{f}: {n} lines (at most {MAX_LINES}): split it by responsibility")
    for b in bad:
        print(b)
    print(f"{len(includes)} headers, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
