#!/usr/bin/env python3
"""Writes the SPDX 2.3 JSON SBOM of one image scripts/build-image.sh builds, to stdout.

It lists the image, the stacksync binary and the Rust crates compiled into it (the `stacksync`
package's normal dependencies for the build host's platform, from `cargo metadata --locked
--filter-platform`; proc-macro crates and what only they use run at compile time and are left
out), the library renderer stacksync-renderer and the Go modules linked into it (helm's library
and what it brings, from its build information: `go version -m`), and the image's Debian packages (a TSV: package, version, architecture, .deb
SHA-256). Deterministic: sorted, and its creation time is the image's.
"""

import argparse
import json
import re
import sys
import tomllib
import uuid
from urllib.parse import quote

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def spdx_id(kind, *parts):
    return "SPDXRef-" + kind + "-" + re.sub(r"[^A-Za-z0-9.-]", "-", "-".join(parts))


def licence(expr):
    # Old Cargo manifests write "MIT/Apache-2.0" for "MIT OR Apache-2.0".
    if not expr:
        return "NOASSERTION"
    return " OR ".join(part.strip() for part in expr.split("/"))


def package(ident, name, version, purpose, download="NOASSERTION", declared="NOASSERTION",
            sha256=None, purl=None, supplier="NOASSERTION", comment=None):
    p = {
        "SPDXID": ident,
        "name": name,
        "versionInfo": version,
        "supplier": supplier,
        "downloadLocation": download,
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": declared,
        "copyrightText": "NOASSERTION",
    }
    if purpose:
        p["primaryPackagePurpose"] = purpose
    if sha256:
        p["checksums"] = [{"algorithm": "SHA256", "checksumValue": sha256}]
    if purl:
        p["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": purl}]
    if comment:
        p["comment"] = comment
    return p


def crates(metadata, lock):
    """The packages compiled into the stacksync binary, sorted by name and version."""
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next(p["id"] for p in metadata["packages"] if p["name"] == "stacksync"
                and p["id"] in metadata["workspace_members"])
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}

    def proc_macro(pid):
        return any("proc-macro" in t["kind"] for t in packages[pid]["targets"])

    seen, todo = set(), [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            normal = any(k["kind"] is None for k in dep["dep_kinds"])
            if normal and dep["pkg"] not in seen and not proc_macro(dep["pkg"]):
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    out = []
    for pid in seen:
        p = packages[pid]
        name, version, source = p["name"], p["version"], p.get("source")
        if source == CRATES_IO:
            download = f"https://static.crates.io/crates/{name}/{name}-{version}.crate"
            purl = f"pkg:cargo/{name}@{version}"
        elif source and source.startswith("git+"):
            download, purl = source, None
        else:
            download, purl = "NOASSERTION", None
        out.append(package(spdx_id("Crate", name, version), name, version, "LIBRARY", download,
                           licence(p.get("license")), checksums.get((name, version)), purl,
                           comment=f"source: {source or 'path'}"))
    return sorted(out, key=lambda p: (p["name"], p["versionInfo"]))


def debs(path):
    out = []
    with open(path) as f:
        for line in f:
            name, version, arch, sha256 = line.rstrip("\n").split("\t")
            purl = f"pkg:deb/debian/{name}@{quote(version, safe='')}?arch={arch}&distro=debian-12"
            out.append(package(spdx_id("Deb", name, version, arch), name, version, None,
                               sha256=sha256, purl=purl, supplier="Organization: Debian",
                               comment=f"Debian bookworm .deb ({arch}); SHA-256 of the .deb; "
                                       f"licence: /usr/share/doc/{name}/copyright in the image"))
    return sorted(out, key=lambda p: (p["name"], p["versionInfo"]))


def go_modules(build_info):
    """The Go modules linked into the renderer, from its build information (`go version -m`:
    a `dep` line per module, `=>` lines for replacements), sorted."""
    out = {}
    with open(build_info) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3 or parts[0] not in ("dep", "=>"):
                continue
            path, version = parts[1], parts[2]
            hash_ = parts[3] if len(parts) > 3 else "none"
            out[(path, version)] = package(spdx_id("Package", "go", path, version), path, version, "LIBRARY",
                                           purl=f"pkg:golang/{path}@{version}",
                                           comment=f"Go module linked into stacksync-renderer, go.sum hash {hash_}")
    return [out[k] for k in sorted(out)]


def main():
    a = argparse.ArgumentParser(description=__doc__)
    for opt in ("metadata", "lock", "debs", "image", "version", "commit", "created", "helm-version",
                "renderer-sha256", "renderer-modules"):
        a.add_argument("--" + opt, required=True)
    a.add_argument("--source")
    args = a.parse_args()
    with open(args.metadata) as f:
        metadata = json.load(f)
    with open(args.lock, "rb") as f:
        lock = tomllib.load(f)
    me = next(p for p in metadata["packages"] if p["name"] == "stacksync"
              and p["id"] in metadata["workspace_members"])

    image = package("SPDXRef-Image", args.image, args.image.rsplit(":", 1)[1], "CONTAINER",
                    comment=f"built by scripts/build-image.sh from commit {args.commit}")
    binary = package("SPDXRef-Package-stacksync", "stacksync", args.version, "APPLICATION",
                     f"git+{args.source}@{args.commit}" if args.source else "NOASSERTION",
                     licence(me.get("license")), comment=f"/usr/local/bin/stacksync, commit {args.commit}")
    renderer = package("SPDXRef-Package-stacksync-renderer", "stacksync-renderer", args.version, "APPLICATION",
                       f"git+{args.source}@{args.commit}#renderer" if args.source else "NOASSERTION",
                       licence(me.get("license")), args.renderer_sha256,
                       comment=f"/usr/local/bin/stacksync-renderer: the library renderer (renderer/ at "
                               f"commit {args.commit}), rendering as helm {args.helm_version}")
    go = go_modules(args.renderer_modules)
    rust = crates(metadata, lock)
    deb = debs(args.debs)

    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": "SPDXRef-Image"}]
    for p in [binary, renderer] + deb:
        relationships.append({"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS",
                              "relatedSpdxElement": p["SPDXID"]})
    for p in rust:
        relationships.append({"spdxElementId": binary["SPDXID"], "relationshipType": "STATIC_LINK",
                              "relatedSpdxElement": p["SPDXID"]})
    for p in go:
        relationships.append({"spdxElementId": renderer["SPDXID"], "relationshipType": "STATIC_LINK",
                              "relatedSpdxElement": p["SPDXID"]})

    name = args.image.split("/", 1)[-1].replace(":", "-")
    ns = uuid.uuid5(uuid.NAMESPACE_URL, f"{args.image}@{args.commit}@{args.created}")
    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"https://spdx.org/spdxdocs/{name}-{ns}",
        "creationInfo": {"created": args.created, "creators": ["Tool: stacksync scripts/build-image.sh"]},
        "documentDescribes": ["SPDXRef-Image"],
        "packages": [image, binary, renderer] + deb + rust + go,
        "relationships": relationships,
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
