"""A wasi:http/proxy function in Python, built into a component with
componentize-py (PyPI):

    componentize-py -d wit -w hearth:examples/function componentize hello -o hello-py.wasm

It answers with the path it was called at and how many times it has been
called, counted in wasi:keyvalue (the function's KV in Hearth).
"""

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports import atomics, wasi_keyvalue_store
from wit_world.imports.types import (
    Fields,
    IncomingRequest,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        calls = atomics.increment(wasi_keyvalue_store.open("default"), "calls", 1)
        text = f"hello from python at {request.path_with_query()}, call {calls}\n"
        response = OutgoingResponse(Fields.from_list([("content-type", b"text/plain")]))
        body = response.body()
        ResponseOutparam.set(response_out, Ok(response))
        with body.write() as stream:
            stream.blocking_write_and_flush(text.encode())
        OutgoingBody.finish(body, None)
