"""The MCP client of `tests/mcp.rs`: the official Python SDK (`mcp`, pinned in
scripts/requirements-test.txt), driven line by line by the Rust test, which makes every assertion.

It reads one JSON request per line on stdin and answers each with exactly one JSON line on stdout
(nothing else is written there; the SDK's logs and the stdio servers' stderr go to stderr):

    {"op": "connect", "session": S, "mode": "stdio", "cairn": BIN, "home": DIR, "server": NAME}
        spawns `BIN --home DIR mcp NAME` (with this process's whole environment: the SDK would
        otherwise pass only a few variables, and a daemon the server starts inherits them)
    {"op": "connect", "session": S, "mode": "http", "url": URL, "token": TOKEN or null}
        streamable HTTP, with `Authorization: Bearer TOKEN` when a token is given
        -> both: the server's InitializeResult (the session is initialised)
    either connect may add "era": "modern" (negotiate 2026-07-28 with server/discover instead of
    the 2025-11-25 initialize handshake; the answer is then the DiscoverResult) and
    "elicitation": true (declare the elicitation capability; each call then says how the person
    answers with "elicit": "accept" | "unconfirmed" | "decline" | "cancel")
    {"op": "list_tools" | "list_resources" | "list_templates", "session": S}
    {"op": "call_raw", "session": S, "name": TOOL, "arguments": {...}, "request_state": STATE?,
     "input_responses": {...}?}
        one tools/call round exactly as given (2026-07-28): the CallToolResult or the
        InputRequiredResult, nothing answered on the caller's behalf
    {"op": "call", "session": S, "name": TOOL, "arguments": {...}}  -> the CallToolResult
        with "elicit" (above) and "progress": true (a progress callback), the answer also holds
        "elicited" (each elicitation's params, as the server sent them), "rounds" (how many
        input-required rounds the call took, 2026-07-28) and "progress" ([{progress, total,
        message}])
    {"op": "read", "session": S, "uri": URI}                        -> the ReadResourceResult
    {"op": "subscribe" | "unsubscribe", "session": S, "uri": URI}
        resources/subscribe (2025-11-25), or a subscriptions/listen stream (2026-07-28), answered
        once the server has acknowledged it -> {}
    {"op": "updates", "session": S}  -> {"uris": [...]}: each notifications/resources/updated so far
    {"op": "list_prompts", "session": S} / {"op": "get_prompt", "session": S, "name": N, "arguments": {...}}
    {"op": "complete", "session": S, "ref": {"type": "ref/prompt", "name": N} | {"type": "ref/resource",
     "uri": TEMPLATE}, "argument": {"name", "value"}, "context": {...}?}   -> the CompleteResult
    {"op": "set_level", "session": S, "level": LEVEL}  -> {}  (logging/setLevel)
    {"op": "logs", "session": S}  -> {"logs": [...]}: each notifications/message's params so far
    {"op": "close", "session": S}                                   -> {"closed": true}
    {"op": "exit"}   closes every session and exits 0 (so does the end of stdin)

An answer is {"ok": RESULT}, the result as it came over the wire (camelCase names, isError tool
results included), or {"error": {"kind", "message", "code"?, "data"?}} when the request raised: a
JSON-RPC error is kind "mcp" with its code. Each session runs in its own task, so one that dies
(or never connects) answers with errors and leaves the others alone. If the SDK cannot be
imported the first line is {"fatal": ..., "missing_sdk": true} and the exit code 3.
"""

import json
import os
import sys
import traceback


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


try:
    import anyio
    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client, types
    from mcp.client.session import ClientRequestContext
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as e:
    emit({"fatal": f"the Python MCP SDK is not importable: {e}", "missing_sdk": True})
    sys.exit(3)


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def leaves(e):
    """The exceptions inside (nested) exception groups of task groups, or `e` itself."""
    inner = getattr(e, "exceptions", None)
    return [x for sub in inner for x in leaves(sub)] if inner else [e]


def failure(e):
    mcp_errors = [x for x in leaves(e) if isinstance(x, MCPError)]
    if mcp_errors:
        e = mcp_errors[0]
    if isinstance(e, MCPError):
        return {"error": {"kind": "mcp", "code": e.code, "message": e.message, "data": e.data}}
    message = "; ".join(f"{type(x).__name__}: {x}" for x in leaves(e))
    return {"error": {"kind": type(e).__name__, "message": message, "trace": traceback.format_exc()}}


class Pending:
    def __init__(self, req):
        self.req = req
        self.done = anyio.Event()
        self.answer = None

    def finish(self, answer):
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


class Conn:
    def __init__(self, spec):
        self.spec = spec
        self.send, self.recv = anyio.create_memory_object_stream(1)
        self.ready = anyio.Event()
        self.first = None  # the answer to `connect`
        self.current = None  # the request being handled
        self.extra = None  # what the call being handled saw: elicitations, rounds, progress
        self.updates = []  # the URIs of notifications/resources/updated, in order
        self.logs = []  # the params of notifications/message, in order
        self.listens = {}  # a 2026-07-28 listen stream per URI: its cancel scope
        self.dead = None  # why the session is gone


def connection(spec):
    if spec["mode"] == "stdio":
        params = StdioServerParameters(
            command=spec["cairn"], args=["--home", spec["home"], "mcp", spec["server"]], env=dict(os.environ)
        )
        return stdio_client(params)
    headers = {"Authorization": f"Bearer {spec['token']}"} if spec.get("token") else {}
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0))
    return _http(spec["url"], client)


class _http:
    """streamable_http_client with an httpx2 client that carries the token, closed after it."""

    def __init__(self, url, client):
        self.url, self.client, self.inner = url, client, None

    async def __aenter__(self):
        await self.client.__aenter__()
        self.inner = streamable_http_client(self.url, http_client=self.client)
        return await self.inner.__aenter__()

    async def __aexit__(self, *exc):
        try:
            return await self.inner.__aexit__(*exc)
        finally:
            await self.client.__aexit__(None, None, None)


async def call(session, conn, req):
    """One tools/call, its elicitations answered as `req["elicit"]` says and its progress kept;
    on 2026-07-28 the input-required rounds are driven here, through the same callback."""
    extra = {"elicited": [], "progress": [], "rounds": 0}
    conn.extra = extra

    async def progress(value, total, message):
        extra["progress"].append({"progress": value, "total": total, "message": message})

    kwargs = {"progress_callback": progress} if req.get("progress") else {}
    name, args = req["name"], req.get("arguments")
    if conn.spec.get("era") != "modern":
        result = await session.call_tool(name, args, **kwargs)
    else:
        result = await session.call_tool(name, args, allow_input_required=True, **kwargs)
        while isinstance(result, types.InputRequiredResult):
            extra["rounds"] += 1
            if extra["rounds"] > 5:
                raise RuntimeError("more than 5 input-required rounds")
            responses = {}
            for key, request in (result.input_requests or {}).items():
                got = await session.dispatch_input_request(ClientRequestContext(session=session, request_id=key), request)
                if isinstance(got, types.ErrorData):
                    raise MCPError(got.code, got.message, got.data)
                responses[key] = got
            result = await session.call_tool(
                name,
                args,
                input_responses=responses or None,
                request_state=result.request_state,
                allow_input_required=True,
                **kwargs,
            )
    return {"ok": dump(result), **extra}


def elicitation(conn):
    async def answer_it(context, params):
        extra = getattr(conn, "extra", None)
        if extra is not None:
            extra["elicited"].append(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        how = (conn.current.req.get("elicit") if conn.current else None) or "cancel"
        if how == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        if how == "unconfirmed":
            return types.ElicitResult(action="accept", content={"confirm": False})
        return types.ElicitResult(action=how)

    return answer_it


def on_message(conn):
    async def handle(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            conn.updates.append(message.params.uri)

    return handle


async def subscribe(session, conn, uri, tg):
    if conn.spec.get("era") != "modern":
        await session.subscribe_resource(uri)
        return {"ok": {}}
    from mcp.client.subscriptions import listen

    acknowledged = anyio.Event()
    scope = anyio.CancelScope()
    failed = {}

    async def stream():
        with scope:
            try:
                async with listen(session, resource_subscriptions=[uri]) as sub:
                    acknowledged.set()
                    async for event in sub:
                        conn.updates.append(event.uri)
            except Exception as e:  # noqa: BLE001
                failed["error"] = failure(e)
            finally:
                acknowledged.set()

    conn.listens[uri] = scope
    tg.start_soon(stream)
    await acknowledged.wait()
    return failed.get("error") or {"ok": {}}


async def answer(session, req, conn, tg):
    op = req["op"]
    try:
        if op == "subscribe":
            return await subscribe(session, conn, req["uri"], tg)
        if op == "unsubscribe":
            if conn.spec.get("era") != "modern":
                await session.unsubscribe_resource(req["uri"])
            elif req["uri"] in conn.listens:
                conn.listens.pop(req["uri"]).cancel()
            return {"ok": {}}
        if op == "updates":
            return {"ok": {"uris": list(conn.updates)}}
        if op == "list_prompts":
            return {"ok": dump(await session.list_prompts())}
        if op == "get_prompt":
            return {"ok": dump(await session.get_prompt(req["name"], req.get("arguments")))}
        if op == "complete":
            r = req["ref"]
            ref = (
                types.PromptReference(type="ref/prompt", name=r["name"])
                if r["type"] == "ref/prompt"
                else types.ResourceTemplateReference(type="ref/resource", uri=r["uri"])
            )
            return {"ok": dump(await session.complete(ref, req["argument"], req.get("context")))}
        if op == "set_level":
            await session.set_logging_level(req["level"])
            return {"ok": {}}
        if op == "logs":
            return {"ok": {"logs": list(conn.logs)}}
        if op == "list_tools":
            return {"ok": dump(await session.list_tools())}
        if op == "call":
            return await call(session, conn, req)
        if op == "call_raw":
            result = await session.call_tool(
                req["name"],
                req.get("arguments"),
                input_responses=req.get("input_responses"),
                request_state=req.get("request_state"),
                allow_input_required=True,
            )
            return {"ok": dump(result)}
        if op == "list_resources":
            return {"ok": dump(await session.list_resources())}
        if op == "list_templates":
            return {"ok": dump(await session.list_resource_templates())}
        if op == "read":
            return {"ok": dump(await session.read_resource(req["uri"]))}
        return {"error": {"kind": "usage", "message": f"unknown op {op!r}"}}
    except Exception as e:  # noqa: BLE001 - every failure goes back to the Rust test
        return failure(e)


async def run_conn(conn):
    try:
        async with connection(conn.spec) as (read, write):
            callbacks = {"elicitation_callback": elicitation(conn)} if conn.spec.get("elicitation") else {}

            async def on_log(params):
                conn.logs.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))

            callbacks["logging_callback"] = on_log
            async with ClientSession(read, write, message_handler=on_message(conn), **callbacks) as session, anyio.create_task_group() as tg:
                if conn.spec.get("era") == "modern":
                    conn.first = {"ok": dump(await session.discover())}
                else:
                    conn.first = {"ok": dump(await session.initialize())}
                conn.ready.set()
                async with conn.recv:
                    async for pending in conn.recv:
                        conn.current = pending
                        if pending.req["op"] == "close":
                            pending.finish({"ok": {"closed": True}})
                            break
                        pending.finish(await answer(session, pending.req, conn, tg))
                        conn.current = None
                # Open listen streams end with the session.
                tg.cancel_scope.cancel()
    except Exception as e:  # noqa: BLE001
        conn.dead = failure(e)
    finally:
        if conn.dead is None:
            conn.dead = {"error": {"kind": "closed", "message": "the session was closed"}}
        if conn.first is None:
            conn.first = conn.dead
        conn.ready.set()
        if conn.current is not None:
            conn.current.finish(conn.dead)


async def main():
    conns = {}
    async with anyio.create_task_group() as tg:
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line or not line.strip():
                if not line:
                    break
                continue
            req = json.loads(line)
            op, sid = req.get("op"), req.get("session")
            if op == "exit":
                break
            if op == "connect":
                if sid in conns:
                    emit({"error": {"kind": "usage", "message": f"session {sid!r} exists"}})
                    continue
                conn = conns[sid] = Conn(req)
                tg.start_soon(run_conn, conn)
                await conn.ready.wait()
                emit(conn.first)
                continue
            conn = conns.get(sid)
            if conn is None:
                emit({"error": {"kind": "usage", "message": f"no session {sid!r}"}})
                continue
            if conn.dead is not None:
                emit({"ok": {"closed": True}} if op == "close" else conn.dead)
                continue
            pending = Pending(req)
            try:
                await conn.send.send(pending)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                emit(conn.dead or {"error": {"kind": "closed", "message": "the session is gone"}})
                continue
            await pending.done.wait()
            emit(pending.answer)
        for conn in conns.values():
            conn.send.close()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except Exception as e:  # noqa: BLE001
        emit({"fatal": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
        sys.exit(3)
