"""An agent script written for E2B's Python SDK, run against cordon with
only its import changed (`from e2b import Sandbox` became the line below)
and the host given by CORDON_HOST instead of E2B_API_KEY."""

from cordon import Sandbox  # was: from e2b import Sandbox

SCRIPT = '''
import json, sys
rows = [{"x": i, "y": i * i} for i in range(5)]
print(json.dumps({"sum": sum(r["y"] for r in rows)}))
'''


def agent_step(sbx):
    # Keep the sandbox for as long as this step may take.
    sbx.set_timeout(120)
    # The model wrote a program: put it in the sandbox, run it, read the output.
    sbx.files.write("analysis.py", SCRIPT)
    streamed = []
    result = sbx.commands.run("python3 analysis.py", on_stdout=lambda line: streamed.append(line), timeout=30)
    entries = [e.name for e in sbx.files.list(".")]
    try:
        sbx.commands.run("python3 -c 'raise SystemExit(2)'")
        failed = None
    except Exception as e:  # E2B raises CommandExitException here too
        failed = (type(e).__name__, e.exit_code)
    return result.stdout, "".join(streamed), result.exit_code, entries, failed


def test_e2b_agent_script_runs_unchanged():
    sbx = Sandbox.create(timeout=60)
    try:
        stdout, streamed, code, entries, failed = agent_step(sbx)
    finally:
        sbx.kill()
    assert stdout == '{"sum": 30}\n' and streamed == stdout and code == 0
    assert "analysis.py" in entries
    assert failed == ("CommandExitException", 2)
