"""The UNO client of a warm LibreOffice (``parsers.soffice``).

Run as its own small process by the Python that has LibreOffice's ``uno``
module (Debian's ``python3-uno``, built for the system's Python, not
necessarily the one swfs runs in), with the pipe name as its argument.  It
connects to ``soffice --accept=pipe,name=NAME;urp;``, says ``{"ready": true}``
and then serves one JSON line per request on stdin, one JSON line per answer
on its protocol descriptor (its original stdout; stdout itself goes to stderr
so nothing LibreOffice prints can break a line).  It says ``{"hello": true}``
once ``uno`` is imported, before it connects::

    {"src": PATH, "dst": PATH, "infilter": NAME or "", "filter": NAME,
     "options": STRING or ""}
    -> {"ok": true, "detected": FILTER} | {"error": "load" | "store", "detail": TEXT}
    {"quit": true}  (the office is asked to end; no answer)

A document is loaded the way ``soffice --convert-to`` loads it (hidden, read
only, no interaction) and, unlike there, with macros never run and links
never updated, whatever the profile says.  Only the standard library and
``uno`` are imported here.
"""

import contextlib
import json
import os
import sys
import time


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import uno
    from com.sun.star.beans import PropertyValue
    from com.sun.star.connection import NoConnectException

    def props(pairs: list[tuple[str, object]]) -> tuple[object, ...]:
        return tuple(PropertyValue(Name=k, Value=v) for k, v in pairs)

    proto.write(json.dumps({"hello": True}) + "\n")
    pipe = sys.argv[1]
    deadline = time.monotonic() + float(sys.argv[2])
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext(
        "com.sun.star.bridge.UnoUrlResolver", local
    )
    while True:
        try:
            ctx = resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
            break
        except NoConnectException:
            if time.monotonic() > deadline:
                proto.write(json.dumps({"error": "connect"}) + "\n")
                return 1
            time.sleep(0.05)
    desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            with contextlib.suppress(Exception):  # the bridge goes down with the office
                desktop.terminate()
            return 0
        load = [
            ("Referer", "private:OpenEvent"),
            ("ReadOnly", True),
            ("OpenNewView", True),
            ("Hidden", True),
            ("Silent", True),
            ("MacroExecutionMode", 0),  # css.document.MacroExecMode.NEVER_EXECUTE
            ("UpdateDocMode", 0),  # css.document.UpdateDocMode.NO_UPDATE
        ]
        if req["infilter"]:
            load.append(("FilterName", req["infilter"]))
        try:
            doc = desktop.loadComponentFromURL(
                uno.systemPathToFileUrl(req["src"]), "_blank", 0, props(load)
            )
        except Exception as exc:  # IllegalArgumentException, IOException...
            proto.write(json.dumps({"error": "load", "detail": str(exc)[:400]}) + "\n")
            continue
        if doc is None:
            proto.write(json.dumps({"error": "load", "detail": ""}) + "\n")
            continue
        try:
            detected = ""
            for arg in doc.getArgs():
                if arg.Name == "FilterName":
                    detected = str(arg.Value)
            store = [("Overwrite", True), ("FilterName", req["filter"])]
            if req["options"]:
                store.append(("FilterOptions", req["options"]))
            doc.storeToURL(uno.systemPathToFileUrl(req["dst"]), props(store))
            answer = {"ok": True, "detected": detected}
        except Exception as exc:
            answer = {"error": "store", "detail": str(exc)[:400]}
        finally:
            try:
                doc.close(True)
            except Exception:
                with contextlib.suppress(Exception):
                    doc.dispose()
        proto.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
