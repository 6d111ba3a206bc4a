// A wasi:http/proxy function in JavaScript, built into a component with
// componentize-js (npm; build-js.mjs). It answers with the path it was
// called at and a value from wasi:config (the function's --env in Hearth).
import { ResponseOutparam, OutgoingResponse, OutgoingBody, Fields } from "wasi:http/types@0.2.12";
import { get } from "wasi:config/store@0.2.0-rc.1";

const encoder = new TextEncoder();

export const incomingHandler = {
  handle(request, responseOut) {
    const greeting = get("GREETING") ?? "hello";
    const response = new OutgoingResponse(new Fields([["content-type", encoder.encode("text/plain")]]));
    const body = response.body();
    ResponseOutparam.set(responseOut, { tag: "ok", val: response });
    const stream = body.write();
    stream.blockingWriteAndFlush(encoder.encode(`${greeting} from javascript at ${request.pathWithQuery()}\n`));
    stream[Symbol.dispose]();
    OutgoingBody.finish(body, undefined);
  },
};
