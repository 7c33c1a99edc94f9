#!/usr/bin/env python3
"""Sizes of bucket documents as MongoDB stores them, for docs/configuration.md (bucket caps).

Encodes buckets of the shape src/store/mongo/document.rs writes (see docs/design/stores.md) with
pymongo's BSON encoder and prints the bucket size and bytes per reading for several counts.
Run it with the stand-in's venv, which the MongoDB tests create:
    target/mongo-standin-venv/bin/python scripts/bucket-sizes.py
"""
import datetime

import bson
from bson import ObjectId

T = datetime.datetime(2026, 11, 21, 10, 0, 0)
ARRAY_ELEMENT_OVERHEAD = 9  # type byte, index key, NUL: what the store adds per array element


def reading(i, fields):
    return {"t": T + datetime.timedelta(seconds=i), "f": {f"f{k}": 20.0 + i for k in range(fields)}}


def bucket(n, fields):
    return {
        "_id": ObjectId(), "s": "env,sensor=s1,site=w3", "v": 1, "start": T, "end": T, "m": "env",
        "tags": [{"k": "sensor", "v": "s1"}, {"k": "site", "v": "w3"}],
        "n": n, "bytes": 0, "first": T, "last": T,
        "stats": {f"f{k}": {"min": 1.0, "max": 2.0, "sum": 3.0, "n": n} for k in range(fields)},
        "r": [reading(i, fields) for i in range(n)],
    }


for fields in (1, 10):
    header = len(bson.encode(bucket(0, fields)))
    one = len(bson.encode(reading(0, fields))) + ARRAY_ELEMENT_OVERHEAD
    print(f"{fields} field(s): header {header} B, one reading ~{one} B")
    for n in (100, 1000, 3600):
        size = len(bson.encode(bucket(n, fields)))
        print(f"  {n:5} readings: bucket {size:8} B, {size / n:6.1f} B/reading, "
              f"header share {header / n:5.2f} B/reading")
