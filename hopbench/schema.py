"""What a record must hold: the key-by-key shape of report.json (RUN_RECORD) and sweep.json
(SWEEP_RECORD) as far as the readers use it, and the check that names the file and the key
when a record does not fit (docs/RESULTS.md documents every field)."""

from __future__ import annotations

import math
from typing import Any

from hopbench.errors import HopbenchError


class Field:
    """What a record's key must hold: its types, whether it is required, and (for objects and
    lists) what is inside."""

    def __init__(self, *types: type, required: bool = False, fields: dict[str, "Field"] | None = None,
                 items: "Field | None" = None, finite: bool = False):
        self.types, self.required, self.fields, self.items, self.finite = types, required, fields, items, finite


def _type_ok(v: Any, types: tuple[type, ...]) -> bool:
    if isinstance(v, bool):
        return bool in types
    return isinstance(v, types)


def check_record(doc: Any, spec: dict[str, Field], where: str, path: str = "") -> None:
    """HopbenchError naming the file and the key when doc does not fit spec (unknown keys
    are allowed: newer additive fields)."""
    if not isinstance(doc, dict):
        raise HopbenchError(f"{where}: {path or 'the record'} is a {type(doc).__name__}, expected an object")
    for key, f in spec.items():
        name = f"{path}{key}"
        if key not in doc:
            if f.required:
                raise HopbenchError(f"{where}: missing key {name}")
            continue
        v = doc[key]
        if v is None and not f.required:
            continue
        if not _type_ok(v, f.types):
            want = " or ".join("number" if t is float else t.__name__ for t in f.types)
            raise HopbenchError(f"{where}: {name} is {type(v).__name__} {str(v)[:40]!r}, expected {want}")
        if f.finite and isinstance(v, (int, float)) and not math.isfinite(v):
            raise HopbenchError(f"{where}: {name} is {v}, expected a finite number")
        if f.fields is not None:
            check_record(v, f.fields, where, name + ".")
        if f.items is not None:
            for i, item in enumerate(v):
                if f.items.fields is not None:
                    check_record(item, f.items.fields, where, f"{name}[{i}].")
                elif not _type_ok(item, f.items.types):
                    raise HopbenchError(f"{where}: {name}[{i}] is {type(item).__name__}, expected "
                                        + " or ".join(t.__name__ for t in f.items.types))


NUM = (int, float)
_SUMMARY = {"complete": Field(bool), "n": Field(int), "p50_ns": Field(*NUM, finite=True),
            "p50_ci_lo_ns": Field(*NUM), "p50_ci_hi_ns": Field(*NUM), "p50_ci_level": Field(*NUM)}
_PLAN = {"transport": Field(str, required=True), "request_bytes": Field(int, required=True),
         "reply_bytes": Field(int, required=True), "gap_ms": Field(*NUM, finite=True), "transport_settings": Field(dict)}
_PAYLOAD = {"payload": Field(str, required=True), "tokens": Field(int), "started_unix": Field(*NUM),
            "plan": Field(dict, required=True, fields=_PLAN), "summary": Field(dict, required=True, fields=_SUMMARY),
            "data_channel": Field(dict), "server_channel": Field(dict)}
_COMMON = {"schema": Field(str, required=True), "schema_version": Field(int, required=True), "software": Field(str),
           "created_utc": Field(str), "result_id": Field(str), "status": Field(str), "config": Field(dict),
           "client_env": Field(dict), "server_env": Field(dict), "seed": Field(int), "fingerprint": Field(str)}
#: a run's (or a sweep cell's) report.json, as far as the readers use it
RUN_RECORD = {**_COMMON, "peer": Field(str, list, dict), "rung": Field(str), "doctor": Field(dict),
              "sweep": Field(dict, fields={"cell": Field(dict, fields={"repeat": Field(int)}), "key": Field(str)}),
              "files": Field(dict), "payloads": Field(list, required=True, items=Field(dict, fields=_PAYLOAD)),
              "config": Field(dict, fields={"rung": Field(str), "rate_mbit": Field(*NUM), "bytes_per_token": Field(int),
                                            "operating_tokens": Field(int)})}
#: sweep.json (and a matrix's)
SWEEP_RECORD = {**_COMMON, "kind": Field(str), "fallback": Field(str),
                "shape": Field(dict, fields={"bytes_per_token": Field(int)}),
                "config": Field(dict, fields={"operating_tokens": Field(int), "path": Field(str)}),
                "rungs": Field(dict), "failed_cells": Field(list), "preflight": Field(dict)}
