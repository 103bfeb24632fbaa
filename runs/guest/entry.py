# cordon's run entry for Python. It reads the run's envelope (one JSON line)
# from stdin, runs the program, and writes the value of its final
# expression as one marked line on stdout. What follows the envelope on
# stdin is the program's own input.
import json, sys

RESULT = "__CORDON_RUN_RESULT__"

def finish(result):
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        line = json.dumps(result)
    except (TypeError, ValueError):
        result["output"] = repr(result.get("output"))
        line = json.dumps(result)
    sys.__stdout__.write(RESULT + line + "\n")
    sys.__stdout__.flush()

env = json.loads(sys.stdin.readline())
scope = {"__name__": "__main__", "INPUT": env.get("input"), "SECRETS": env.get("secrets") or {}}
try:
    try:
        # A program that is one expression needs no parse tree (ast costs
        # some 6 ms to import).
        code, last = compile(env["source"], "<run>", "eval"), None
    except SyntaxError:
        import ast

        tree = ast.parse(env["source"], "<run>")
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = compile(ast.Expression(tree.body.pop().value), "<run>", "eval")
        code = compile(tree, "<run>", "exec")
    value = eval(code, scope)
    if last is not None:
        value = eval(last, scope)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finish({"ok": code == 0} if code == 0 else {"ok": False, "error": "exit status %d" % code})
    sys.exit(code)
except BaseException as e:
    import traceback  # only a failing run pays for it

    traceback.print_exc()
    finish({"ok": False, "error": "".join(traceback.format_exception_only(type(e), e)).strip()})
    sys.exit(1)
finish({"ok": True} if value is None else {"ok": True, "output": value})
