"""Rendering deploy/'s kustomizations for the manifest tests, as `kubectl kustomize` would.

There is no kustomize binary on PyPI, so this renders the subset of kustomize that deploy/ uses:
`resources` (files and directories), `namespace`, `images`, `patches` (a file holding one
strategic-merge patch, found by kind and name, or a JSON 6902 patch, or a `$patch: delete`, applied
to every resource its `target` selects: kind and name, each a regular expression), and
`configMapGenerator` entries from `files` with `disableNameSuffixHash`. Any other field is
refused, so a kustomization that outgrows this renderer fails its test instead of rendering wrong.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "images", "patches", "configMapGenerator"}
CLUSTER_SCOPED = {"Namespace"}


def render(directory: Path) -> list[Resource]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - SUPPORTED
    if unsupported:
        raise ValueError(f"{directory}/kustomization.yaml uses {sorted(unsupported)}, which tests/kustomize.py does not render")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        resources += render(path) if path.is_dir() else load_documents(path)
    resources += [generated_config_map(directory, generator) for generator in kustomization.get("configMapGenerator", [])]
    for patch in kustomization.get("patches", []):
        apply_patch(resources, directory / patch["path"], patch.get("target"))
    for image in kustomization.get("images", []):
        replace_image(resources, image)
    if "namespace" in kustomization:
        for resource in resources:
            if resource["kind"] not in CLUSTER_SCOPED:
                resource["metadata"]["namespace"] = kustomization["namespace"]
    return resources


def generated_config_map(directory: Path, generator: dict[str, Any]) -> Resource:
    """A ConfigMap holding `files` (kustomize would append a content hash to its name unless told not to)."""
    options = generator.get("options", {})
    unsupported = set(generator) - {"name", "files", "options"} or set(options) - {"labels", "annotations", "disableNameSuffixHash"}
    if unsupported or not options.get("disableNameSuffixHash"):
        raise ValueError(f"configMapGenerator {generator.get('name')}: only files with disableNameSuffixHash are rendered here")
    metadata = {"name": generator["name"], **{key: options[key] for key in ("labels", "annotations") if key in options}}
    data = {Path(file).name: (directory / file).read_text() for file in generator["files"]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def load_documents(path: Path) -> list[Resource]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def apply_patch(resources: list[Resource], path: Path, target: dict[str, str] | None) -> None:
    if target is not None:
        operations = yaml.safe_load(path.read_text())
        selected = [resource for resource in resources if selects(target, resource)]
        if not selected:
            raise ValueError(f"patch {path} selects nothing with {target}")
        if isinstance(operations, dict) and operations.get("$patch") == "delete":
            resources[:] = [resource for resource in resources if not any(resource is chosen for chosen in selected)]
            return
        for resource in selected:
            for operation in operations:
                json6902(resource, operation)
        return
    patches = load_documents(path)
    if len(patches) != 1:
        raise ValueError(f"patch {path} holds {len(patches)} documents; give each strategic-merge patch a file of its own")
    [patch] = patches
    exactly = {"kind": re.escape(patch["kind"]), "name": re.escape(patch["metadata"]["name"])}
    matches = [resource for resource in resources if selects(exactly, resource)]
    if len(matches) != 1:
        raise ValueError(f"patch {path} for {patch['kind']}/{patch['metadata']['name']} matches {len(matches)} resources")
    merged = strategic_merge(matches[0], patch)
    matches[0].clear()
    matches[0].update(merged)


def selects(target: dict[str, str], resource: Resource) -> bool:
    unknown = set(target) - {"kind", "name"}
    if unknown:
        raise ValueError(f"patch targets by {sorted(unknown)} are not rendered by tests/kustomize.py")
    # kustomize matches each field as a regular expression anchored at both ends.
    return all(re.fullmatch(target[field], value) for field, value in (("kind", resource["kind"]), ("name", resource["metadata"]["name"]))
               if field in target)


def strategic_merge(base: Any, patch: Any) -> Any:
    """Maps merge key by key; lists of named items (containers, env, volumes) merge by name; any
    other list is replaced, as kustomize does for lists without a merge key."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(item, dict) and "name" in item for item in base + patch):
        by_name = {item["name"]: item for item in base}
        merged_list = [strategic_merge(by_name[item["name"]], item) if item["name"] in by_name else copy.deepcopy(item) for item in patch]
        patched = {item["name"] for item in patch}
        return [item for item in base if item["name"] not in patched] + merged_list
    return copy.deepcopy(patch)


def json6902(resource: Resource, operation: dict[str, Any]) -> None:
    *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].lstrip("/").split("/")]
    node: Any = resource
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) and last != "-" else last
    if operation["op"] == "replace":
        if isinstance(node, dict) and key not in node:
            raise ValueError(f"replace {operation['path']}: nothing there in {resource['kind']}/{resource['metadata']['name']}")
        node[key] = copy.deepcopy(operation["value"])
    elif operation["op"] == "add":
        if isinstance(node, list):
            node.insert(len(node) if key == "-" else key, copy.deepcopy(operation["value"]))
        else:
            node[key] = copy.deepcopy(operation["value"])
    elif operation["op"] == "remove":
        del node[key]
    else:
        raise ValueError(f"JSON patch op {operation['op']!r} is not rendered by tests/kustomize.py")


def replace_image(resources: list[Resource], image: dict[str, str]) -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str) and value.split(":")[0] == image["name"]:
                    name = image.get("newName", image["name"])
                    node[key] = f"{name}:{image['newTag']}" if "newTag" in image else name
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(resources)
