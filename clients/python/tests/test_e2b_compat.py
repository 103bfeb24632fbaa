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


def test_e2b_pause_between_turns():
    # An agent that pauses its sandbox between a user's turns and finds
    # it again by id, as E2B's v2 SDK has it (pause, a paginated list,
    # connect that resumes).
    sbx = Sandbox.create(timeout=60)
    try:
        sbx.commands.run("sleep 600", background=True)
        sbx.files.write("memory.txt", "turn 1")
        sbx.pause()
        paginator = Sandbox.list()
        ids = []
        while paginator.has_next:
            ids += [s.sandbox_id for s in paginator.next_items()]
        assert sbx.sandbox_id in ids
        same = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert same.files.read("memory.txt") == "turn 1"
        assert any(c["command"] for c in same.commands.list())
    finally:
        sbx.kill()
