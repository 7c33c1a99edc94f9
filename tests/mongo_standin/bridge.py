"""A MongoDB stand-in for bucketd's store tests.

mockupdb speaks MongoDB's wire protocol; mongomock implements MongoDB's query, update and
aggregation semantics. This bridge answers the commands the Rust driver sends by running them
on one in-process mongomock client, and adds what mongomock lacks or gets wrong and the store relies on:

- the 16 MiB document limit: a statement whose result would be larger than
  maxBsonObjectSize is not applied and answers MongoDB's error code 17419 (update) or
  17420 (upsert that would insert a too-large document), without touching other statements;
- the command size limit: a command document larger than maxBsonObjectSize + 16 KiB is
  refused with code 10334, as mongod refuses it;
- cursors with batching (firstBatch / getMore / killCursors) so long results stream;
- `$min`/`$max` in BSON's comparison order, and `$not` of the documented one-element array.

It is slow (every statement scans the collection): use it for correctness, never speed.

Fault injection, only with --faults (so the store's error mapping can be tested):
- an update statement for sensor `s` (in its filter or its $setOnInsert) starting with
  "fault:code:<N>:" fails with write error code N and is not applied;
- an update command containing a statement whose `s` is "fault:hangup" closes the connection
  without replying (a network error for the client).

Test hooks: --max-bson N reports and enforces a smaller maxBsonObjectSize (documents and,
plus 16 KiB, commands), --max-write-batch N a smaller maxWriteBatchSize, --update-delay-ms N
makes every update command wait N ms before it runs (a store that is up but slow); the `bridgeStats`
command reports how many commands were refused as too large, the commands received by name,
the `maxTimeMS` of the update commands received (by value; "None" when absent), the documents
returned by cursors (`cursorDocuments`), and the documents each `$unwind` path produced
(`unwound`).

Usage: python bridge.py [--faults] [--max-bson N] [--max-write-batch N] [--update-delay-ms N]
Prints "PORT <n>" on stdout once listening on 127.0.0.1; exits when stdin closes, so a test
process that dies never leaves a stand-in behind.
"""

import argparse
import copy
import collections
import itertools
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from datetime import datetime, timezone

import bson
import mockupdb
import mongomock
from collections.abc import Mapping
from mongomock import aggregate as mongomock_aggregate
from mongomock import collection as mongomock_collection
from mongomock.collection import Collection as MockCollection
from mongomock.filtering import BsonComparable, filter_applies
from bson import Int64
from pymongo.errors import OperationFailure

MAX_BSON = 16 * 1024 * 1024
# mongod accepts a command document up to BSONObjMaxInternalSize = maxBsonObjectSize + 16 KiB.
COMMAND_SLACK = 16 * 1024
MAX_MESSAGE = 48_000_000
MAX_WRITE_BATCH = 100_000
# MongoDB 7.0 reports maxWireVersion 21.
MAX_WIRE_VERSION = 21
# A reply batch stops growing past this many bytes, as mongod's do.
REPLY_BATCH_BYTES = MAX_BSON - 64 * 1024


def _receive(sock, length):
    # mockupdb's own receive concatenates bytes chunk by chunk, quadratic for 16 MiB messages.
    buf = bytearray(length)
    view = memoryview(buf)
    got = 0
    while got < length:
        n = sock.recv_into(view[got:], length - got)
        if n == 0:
            raise socket.error(104, "closed")
        got += n
    return bytes(buf)


mockupdb.mock_server_receive = _receive


def _server_loop(self, client, client_addr):
    # mockupdb's own loop runs every handler under the server's lock, so a long command
    # would leave the driver's heartbeat (hello on another connection) unanswered until the
    # driver gives the server up. Here handlers run concurrently; the bridge locks only
    # around mongomock.
    while not self._stopped:
        try:
            request = mockupdb.mock_server_receive_request(client, self)
        except (socket.error, ValueError, NotImplementedError):
            break
        for responder in reversed(self._autoresponders):
            if responder.handle(request):
                break
    client.close()


mockupdb.MockupDB._server_loop = _server_loop


# mongomock scans every document for every query, which makes one flush of thousands of
# sensors (each statement looks up its sensor's bucket) quadratic. Two lookups replace the
# scan for the filters the store sends: `_id` equality, and sensor `s` equality through an
# index the bridge keeps of every document it inserts (documents get in only through the
# bridge's insert and upsert paths; `s` never changes). The full filter still decides.
_SENSOR_INDEX = {}
_scan = MockCollection._iter_documents


def _iter_documents(self, filter):
    if isinstance(filter, Mapping):
        self._store._remove_expired_documents()
        docs = self._store._documents
        key = filter.get("_id")
        if key is not None and not isinstance(key, Mapping):
            found = [docs[key]] if key in docs else []
            return (d for d in found if filter_applies(filter, d))
        sensor = filter.get("s")
        if isinstance(sensor, str):
            ids = _SENSOR_INDEX.get((self.database.name, self.name, sensor), ())
            found = [docs[i] for i in ids if i in docs]
            return (d for d in found if filter_applies(filter, d))
    return _scan(self, filter)


MockCollection._iter_documents = _iter_documents


# mongomock's `$min`/`$max` (update operators and `$group` accumulators) use Python's min/max,
# which cannot order two documents (TypeError) and orders values of different BSON types by
# Python's rules. mongod compares with BSON's comparison order: by type, then documents field
# by field (name, then value, in order). The store's `stats.<f>.first/last` are `{t, v}`
# documents whose order must be the time's first, so both use mongomock's own BSON comparison
# here (on ties the value already held stays, as in mongod: it updates only when strictly
# less / greater).
def _bson_min(values):
    return min(values, key=BsonComparable)


def _bson_max(values):
    # max() keeps the first of equal maxima, like min(); mongod's $max keeps the held value.
    return max(values, key=BsonComparable)


def _min_updater(doc, field_name, value):
    if isinstance(doc, dict):
        doc[field_name] = _bson_min([doc.get(field_name, value), value])


def _max_updater(doc, field_name, value):
    if isinstance(doc, dict):
        doc[field_name] = _bson_max([doc.get(field_name, value), value])


mongomock_collection._updaters["$min"] = _min_updater
mongomock_collection._updaters["$max"] = _max_updater
mongomock_aggregate._GROUPING_OPERATOR_MAP["$min"] = lambda values: mongomock_aggregate._group_operation(
    values, _bson_min
)
mongomock_aggregate._GROUPING_OPERATOR_MAP["$max"] = lambda values: mongomock_aggregate._group_operation(
    values, _bson_max
)


# mongomock negates `$not`'s argument as it is given, so the documented form
# `{$not: [<expression>]}` (a one-element array, always truthy) is always false; mongod negates
# the array's one expression.
_boolean_operator = mongomock_aggregate._Parser._handle_boolean_operator


def _handle_boolean_operator(self, operator, values):
    if operator == "$not" and isinstance(values, list) and len(values) == 1:
        values = values[0]
    return _boolean_operator(self, operator, values)


mongomock_aggregate._Parser._handle_boolean_operator = _handle_boolean_operator


# Documents each `$unwind` stage produced, by the path it unwound: the tests count how many
# readings (`$r`) a query made the server unwind.
_UNWOUND = collections.Counter()
_unwind = mongomock_aggregate._PIPELINE_HANDLERS["$unwind"]


def _counted_unwind(in_collection, database, options):
    out = _unwind(in_collection, database, options)
    path = options.get("path") if isinstance(options, dict) else options
    _UNWOUND[str(path)] += len(out)
    return out


mongomock_aggregate._PIPELINE_HANDLERS["$unwind"] = _counted_unwind


def _index_document(coll, doc_id):
    doc = coll._store._documents.get(doc_id)
    if doc is not None and isinstance(doc.get("s"), str):
        ids = _SENSOR_INDEX.setdefault((coll.database.name, coll.name, doc["s"]), [])
        if doc_id not in ids:
            ids.append(doc_id)


class Bridge:
    def __init__(self, faults, max_bson, max_write_batch, update_delay_ms=0):
        self.client = mongomock.MongoClient()
        # mockupdb runs a thread per connection; mongomock and the cursors are not
        # thread-safe, so every data command holds this lock (hello and ping do not).
        self.lock = threading.Lock()
        self.faults = faults
        self.max_doc = max_bson
        self.max_command = max_bson + COMMAND_SLACK
        self.max_write_batch = max_write_batch
        self.update_delay = update_delay_ms / 1000.0
        self.refused_commands = 0
        # Commands received, by name: the tests count round trips with it.
        self.command_counts = collections.Counter()
        # The maxTimeMS of each update command received ("None" when absent), by value.
        self.update_max_time_ms = collections.Counter()
        # Documents returned by find and aggregate cursors: what the client read.
        self.cursor_documents = 0
        self.cursors = {}
        self.cursor_ids = itertools.count(1)
        self.connection_ids = itertools.count(1)

    # -- dispatch -------------------------------------------------------------------------
    def handle(self, request):
        name = request.command_name
        doc = request.doc
        self.command_counts[name] += 1
        if name and name.lower() == "update":
            self.update_max_time_ms[str(doc.get("maxTimeMS"))] += 1
            if self.update_delay:
                time.sleep(self.update_delay)
        try:
            reply = self.dispatch(name, doc, request)
        except OperationFailure as e:
            reply = {"ok": 0, "code": e.code or 2, "errmsg": str(e)}
        except Exception as e:  # a bug in the bridge: answer instead of hanging the client
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": 0, "code": 1, "errmsg": "bridge error: %r" % (e,)}
        if reply is None:
            return request.hangup()
        return request.replies(reply)

    def dispatch(self, name, doc, request):
        key = name.lower() if name else ""
        if key in ("hello", "ismaster"):
            return self.hello()
        if key in ("ping", "endsessions", "saslstart", "getlasterror"):
            return {"ok": 1}
        if key == "bridgestats":
            return {"ok": 1, "refusedCommands": self.refused_commands,
                    "commands": dict(self.command_counts),
                    "updateMaxTimeMS": dict(self.update_max_time_ms),
                    "cursorDocuments": self.cursor_documents,
                    "unwound": dict(_UNWOUND)}
        if key == "buildinfo":
            return {"ok": 1, "version": "7.0.0", "versionArray": [7, 0, 0, 0]}
        db = request.namespace.split(".")[0] if request.namespace else doc.get("$db", "test")
        handler = getattr(self, "cmd_" + key, None)
        if handler is None:
            return {"ok": 0, "code": 59, "errmsg": "no such command: '%s'" % name,
                    "codeName": "CommandNotFound"}
        with self.lock:
            return handler(self.client[db], doc)

    def hello(self):
        return {
            "ok": 1,
            "helloOk": True,
            "isWritablePrimary": True,
            "ismaster": True,
            "maxBsonObjectSize": self.max_doc,
            "maxMessageSizeBytes": MAX_MESSAGE,
            "maxWriteBatchSize": self.max_write_batch,
            "localTime": datetime.now(timezone.utc),
            "logicalSessionTimeoutMinutes": 30,
            "connectionId": next(self.connection_ids),
            "minWireVersion": 0,
            "maxWireVersion": MAX_WIRE_VERSION,
            "readOnly": False,
        }

    # -- writes ---------------------------------------------------------------------------
    def command_too_large(self, doc):
        size = len(bson.encode(doc))
        if size > self.max_command:
            self.refused_commands += 1
            return {"ok": 0, "code": 10334, "codeName": "BSONObjectTooLarge",
                    "errmsg": "BSONObj size: %d (0x%x) is invalid. Size must be between 0 and "
                              "%d(16MB)" % (size, size, self.max_command)}
        return None

    def cmd_update(self, db, doc):
        too_large = self.command_too_large(doc)
        if too_large:
            return too_large
        coll = db[doc["update"]]
        statements = doc.get("updates", [])
        if len(statements) > self.max_write_batch:
            self.refused_commands += 1
            return {"ok": 0, "code": 16, "codeName": "InvalidLength",
                    "errmsg": "Write batch sizes must be between 1 and %d. Got %d operations."
                              % (self.max_write_batch, len(statements))}
        if self.faults and any(st["q"].get("s") == "fault:hangup" for st in statements):
            return None
        ordered = doc.get("ordered", True)
        n = n_modified = 0
        upserted, errors = [], []
        for index, st in enumerate(statements):
            try:
                matched, modified, new_id = self.update_one(coll, st)
                n += matched
                n_modified += modified
                if new_id is not None:
                    n += 1
                    upserted.append({"index": index, "_id": new_id})
            except OperationFailure as e:
                errors.append({"index": index, "code": e.code or 2, "errmsg": str(e)})
                if ordered:
                    break
        reply = {"ok": 1, "n": n, "nModified": n_modified}
        if upserted:
            reply["upserted"] = upserted
        if errors:
            reply["writeErrors"] = errors
        return reply

    def update_one(self, coll, st):
        q, u = st["q"], st["u"]
        s = q.get("s", (u.get("$setOnInsert") or {}).get("s"))
        if self.faults and isinstance(s, str) and s.startswith("fault:code:"):
            code = int(s.split(":")[2])
            raise OperationFailure("injected fault %d" % code, code)
        if st.get("multi"):
            result = coll.update_many(q, u, upsert=bool(st.get("upsert")))
            if result.upserted_id is not None:
                _index_document(coll, result.upserted_id)
            return result.matched_count, result.modified_count, result.upserted_id
        old = coll.find_one(q)
        if old is not None:
            result = coll.update_one({"_id": old["_id"]}, u)
            new = coll.find_one({"_id": old["_id"]})
            if self.doc_size(new) > self.max_doc:
                coll.replace_one({"_id": old["_id"]}, old)
                raise OperationFailure(
                    "Resulting document after update is larger than %d" % self.max_doc, 17419)
            return 1, result.modified_count, None
        if not st.get("upsert"):
            return 0, 0, None
        result = coll.update_one(q, u, upsert=True)
        new_id = result.upserted_id
        _index_document(coll, new_id)
        new = coll.find_one({"_id": new_id})
        if self.doc_size(new) > self.max_doc:
            coll.delete_one({"_id": new_id})
            raise OperationFailure(
                "Document to upsert is larger than %d" % self.max_doc, 17420)
        return 0, 0, new_id

    @staticmethod
    def doc_size(doc):
        return len(bson.encode(doc)) if doc is not None else 0

    def cmd_insert(self, db, doc):
        too_large = self.command_too_large(doc)
        if too_large:
            return too_large
        coll = db[doc["insert"]]
        ordered = doc.get("ordered", True)
        n, errors = 0, []
        for index, d in enumerate(doc.get("documents", [])):
            try:
                if self.doc_size(d) > self.max_doc:
                    raise OperationFailure("object to insert too large", 10334)
                _index_document(coll, coll.insert_one(d).inserted_id)
                n += 1
            except OperationFailure as e:
                errors.append({"index": index, "code": e.code or 2, "errmsg": str(e)})
                if ordered:
                    break
        reply = {"ok": 1, "n": n}
        if errors:
            reply["writeErrors"] = errors
        return reply

    def cmd_delete(self, db, doc):
        coll = db[doc["delete"]]
        n = 0
        for st in doc.get("deletes", []):
            if st.get("limit", 0) == 1:
                n += coll.delete_one(st["q"]).deleted_count
            else:
                n += coll.delete_many(st["q"]).deleted_count
        return {"ok": 1, "n": n}

    # -- reads ----------------------------------------------------------------------------
    def cmd_find(self, db, doc):
        coll = db[doc["find"]]
        cursor = coll.find(doc.get("filter", {}), doc.get("projection"))
        if doc.get("sort"):
            cursor = cursor.sort(list(doc["sort"].items()))
        if doc.get("skip"):
            cursor = cursor.skip(doc["skip"])
        if doc.get("limit"):
            cursor = cursor.limit(abs(doc["limit"]))
        return self.open_cursor(db, doc["find"], iter(cursor), doc.get("batchSize"))

    def cmd_aggregate(self, db, doc):
        coll = db[doc["aggregate"]]
        results = coll.aggregate(list(doc.get("pipeline", [])))
        batch = (doc.get("cursor") or {}).get("batchSize")
        return self.open_cursor(db, doc["aggregate"], iter(results), batch)

    def open_cursor(self, db, coll_name, it, batch_size):
        ns = "%s.%s" % (db.name, coll_name)
        batch, exhausted = self.take(it, batch_size or 101)
        self.cursor_documents += len(batch)
        cursor_id = Int64(0)  # the driver insists on int64 cursor ids
        if not exhausted:
            cursor_id = Int64(next(self.cursor_ids))
            self.cursors[cursor_id] = it
        return {"ok": 1, "cursor": {"id": cursor_id, "ns": ns, "firstBatch": batch}}

    def cmd_getmore(self, db, doc):
        cursor_id = doc["getMore"]
        it = self.cursors.get(cursor_id)
        ns = "%s.%s" % (db.name, doc["collection"])
        if it is None:
            return {"ok": 0, "code": 43, "codeName": "CursorNotFound",
                    "errmsg": "cursor id %d not found" % cursor_id}
        batch, exhausted = self.take(it, doc.get("batchSize") or 1_000_000)
        self.cursor_documents += len(batch)
        if exhausted:
            del self.cursors[cursor_id]
            cursor_id = Int64(0)
        return {"ok": 1, "cursor": {"id": cursor_id, "ns": ns, "nextBatch": batch}}

    def cmd_killcursors(self, db, doc):
        killed = []
        for cursor_id in doc.get("cursors", []):
            if self.cursors.pop(cursor_id, None) is not None:
                killed.append(cursor_id)
        return {"ok": 1, "cursorsKilled": killed, "cursorsNotFound": [], "cursorsAlive": [],
                "cursorsUnknown": []}

    @staticmethod
    def take(it, batch_size):
        batch, size = [], 0
        while len(batch) < batch_size:
            try:
                d = next(it)
            except StopIteration:
                return batch, True
            batch.append(d)
            size += len(bson.encode(d))
            if size >= REPLY_BATCH_BYTES:
                break
        return batch, False

    # -- administration -------------------------------------------------------------------
    def cmd_createindexes(self, db, doc):
        coll = db[doc["createIndexes"]]
        before = len(coll.index_information())
        for spec in doc.get("indexes", []):
            options = {k: v for k, v in spec.items() if k not in ("key", "v")}
            coll.create_index(list(spec["key"].items()), **options)
        after = len(coll.index_information())
        return {"ok": 1, "numIndexesBefore": before, "numIndexesAfter": after}

    def cmd_listindexes(self, db, doc):
        coll = db[doc["listIndexes"]]
        specs = []
        for name, info in coll.index_information().items():
            spec = OrderedDict([("v", 2), ("key", OrderedDict(info["key"])), ("name", name)])
            for k, v in info.items():
                if k not in ("key", "v"):
                    spec[k] = v
            specs.append(spec)
        return self.open_cursor(db, doc["listIndexes"], iter(specs), None)

    def cmd_dropindexes(self, db, doc):
        coll = db[doc["dropIndexes"]]
        index = doc.get("index")
        if index == "*":
            coll.drop_indexes()
        else:
            coll.drop_index(index)
        return {"ok": 1}

    def cmd_drop(self, db, doc):
        db.drop_collection(doc["drop"])
        return {"ok": 1}

    def cmd_dropdatabase(self, db, doc):
        self.client.drop_database(db.name)
        return {"ok": 1}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--max-bson", type=int, default=MAX_BSON)
    parser.add_argument("--max-write-batch", type=int, default=MAX_WRITE_BATCH)
    parser.add_argument("--update-delay-ms", type=int, default=0)
    args = parser.parse_args()

    bridge = Bridge(args.faults, args.max_bson, args.max_write_batch, args.update_delay_ms)
    server = mockupdb.MockupDB(port=0, request_timeout=3600)
    server._address = ("127.0.0.1", 0)
    server.autoresponds(bridge.handle)
    port = server.run()
    print("PORT %d" % port, flush=True)
    # The parent holds our stdin open; EOF means it is gone, so we go too.
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
