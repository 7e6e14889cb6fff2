#!/usr/bin/env python3
"""Compares two sets of Kubernetes objects, each as kubectl read them (`kubectl annotate --local
-o json`: a stream of objects or Lists), object by object. Usage: compare.py HELM.json STACKSYNC.json
HELM-AGAIN.json (a second helm run, to tell random fields). Prints `identical N` or `DIFF <first
difference>` and exits 0 / 1. Used by scripts/corpus.sh."""
import json
import sys


def objects(path):
    with open(path, encoding="utf-8") as f:
        text = f.read().strip()
    if not text:
        return {}
    # kubectl prints one JSON document per object (or a List).
    items, dec, i = [], json.JSONDecoder(), 0
    while i < len(text):
        doc, i = dec.raw_decode(text, i)
        while i < len(text) and text[i].isspace():
            i += 1
        items.extend(doc["items"] if doc.get("kind") == "List" and "items" in doc else [doc])
    out = {}
    for o in items:
        meta = o.get("metadata", {})
        key = f'{o.get("apiVersion")}/{o.get("kind")}/{meta.get("namespace", "-")}/{meta.get("name")}'
        out[key] = o
    return out


MISSING = object()


def first_diff(a, b, alt, path=""):
    """The first difference between helm's `a` and stacksync's `b` at a place where helm's second
    run `alt` agrees with `a` (what differs between two helm runs is random: genCA, randAlphaNum)."""
    if alt is not MISSING and alt != a and not (isinstance(a, (dict, list)) and type(alt) is type(a)):
        RANDOM.append(path)
        return None
    if type(a) is not type(b):
        return f"{path or '.'}: {json.dumps(a)[:80]} vs {json.dumps(b)[:80]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'helm' if k in a else 'stacksync'}"
            d = first_diff(a[k], b[k], alt.get(k, MISSING) if isinstance(alt, dict) else MISSING, f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            z = alt[i] if isinstance(alt, list) and i < len(alt) else MISSING
            d = first_diff(x, y, z, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {json.dumps(a)[:80]} vs {json.dumps(b)[:80]}"


RANDOM = []


def main():
    helm, ours, again = objects(sys.argv[1]), objects(sys.argv[2]), objects(sys.argv[3])
    for key in sorted(set(helm) | set(ours)):
        if key not in ours:
            print(f"DIFF {key}: missing in stacksync's output")
            return 1
        if key not in helm:
            print(f"DIFF {key}: not in helm's output")
            return 1
        d = first_diff(helm[key], ours[key], again.get(key, MISSING))
        if d:
            print(f"DIFF {key} {d}")
            return 1
    if RANDOM:
        print(f"identical {len(helm)} (random in helm, differs between two helm runs: {RANDOM[0]}" + (f" and {len(RANDOM) - 1} more" if len(RANDOM) > 1 else "") + ")")
    else:
        print(f"identical {len(helm)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
