"""`sampan render-chat` against Python jinja2 configured as transformers configures it.

Every fixture chat template x every conversation in tests/data/chat/conversations.json x
add_generation_prompt on/off is rendered by both and compared byte for byte. Where the
reference raises (the template rejects the conversation), sampan must exit non-zero with one
"error:" line, which must carry the message when it came from raise_exception().
"""

import datetime
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import parse_args  # noqa: E402

RUN_TIMEOUT_S = 300
FAKE_DATE = "2024-09-05"


class RaisedByTemplate(Exception):
    pass


def reference_env():
    """Mirrors transformers' _compile_jinja_template (utils/chat_template_utils.py)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        # The same fixed date sampan gets through SAMPAN_FAKE_DATE.
        return datetime.datetime.strptime(FAKE_DATE, "%Y-%m-%d").strftime(format)

    class Namespace(jinja2.utils.Namespace):
        pass

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = Namespace
    return env


def main():
    args = parse_args(__doc__)
    passed = failed = 0
    template_dir = os.path.join(args.source_dir, "..", "shared", "fixtures", "chat_templates")
    # A missing fixture or reference is a failure: no test passes by skipping.
    if not os.path.isdir(template_dir):
        print(f"FAIL: no chat template fixtures at {template_dir} (../shared beside the checkout)")
        print("0 passed, 1 failed")
        return 1
    try:
        env = reference_env()
    except ImportError as e:
        print(f"FAIL: python jinja2 unavailable ({e}); scripts/setup.sh installs it")
        print("0 passed, 1 failed")
        return 1
    with open(os.path.join(args.source_dir, "tests", "data", "chat", "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)
    work = os.path.join(args.work_dir, "render_chat")
    os.makedirs(work, exist_ok=True)
    bos, eos = "<s>", "</s>"
    run_env = dict(os.environ, SAMPAN_FAKE_DATE=FAKE_DATE)

    for template_name in sorted(os.listdir(template_dir)):
        template_path = os.path.join(template_dir, template_name)
        with open(template_path, encoding="utf-8") as f:
            source = f.read()
        compiled = env.from_string(source)
        for case in cases:
            msg_path = os.path.join(work, f"{case['name']}.messages.json")
            with open(msg_path, "w", encoding="utf-8") as f:
                json.dump(case["messages"], f, ensure_ascii=False)
            tools_path = None
            if "tools" in case:
                tools_path = os.path.join(work, f"{case['name']}.tools.json")
                with open(tools_path, "w", encoding="utf-8") as f:
                    json.dump(case["tools"], f, ensure_ascii=False)
            for agp in (False, True):
                label = f"{template_name} / {case['name']} / add_generation_prompt={agp}"
                variables = {"messages": case["messages"], "add_generation_prompt": agp, "bos_token": bos,
                             "eos_token": eos}
                if "tools" in case:
                    variables["tools"] = case["tools"]
                expected, raised, from_template = None, None, False
                try:
                    expected = compiled.render(**variables)
                except RaisedByTemplate as e:
                    raised, from_template = str(e), True
                except Exception as e:  # noqa: BLE001 - any reference failure must be a sampan failure too
                    raised = f"{type(e).__name__}: {e}"
                cmd = [args.sampan, "render-chat", "--template", template_path, "--messages", msg_path,
                       "--bos-token", bos, "--eos-token", eos]
                if tools_path:
                    cmd += ["--tools", tools_path]
                if agp:
                    cmd.append("--add-generation-prompt")
                r = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S, env=run_env)
                stderr = r.stderr.decode("utf-8", "replace")
                if raised is None:
                    got = r.stdout.decode("utf-8", "replace")
                    ok = r.returncode == 0 and got == expected
                    why = f"exit {r.returncode}, stderr {stderr.strip()!r}" if r.returncode else \
                        f"expected {expected!r}\n      got      {got!r}"
                else:
                    lines = [l for l in stderr.splitlines() if l.startswith("error:")]
                    ok = r.returncode != 0 and len(lines) == 1 and (not from_template or raised in lines[0]) \
                        and r.stdout == b""
                    why = f"reference raised {raised!r}; sampan exit {r.returncode}, stderr {stderr.strip()!r}"
                if ok:
                    passed += 1
                    print(f"ok   {label}" + (" (both reject)" if raised else ""))
                else:
                    failed += 1
                    print(f"FAIL {label}: {why}")

    # --model DIR: the template and the bos/eos strings come from tokenizer_config.json.
    model_dir = os.path.join(work, "model")
    os.makedirs(model_dir, exist_ok=True)
    src = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}"
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": src}],
                   "bos_token": {"content": "<B>"}, "eos_token": "<E>"}, f)
    msg_path = os.path.join(work, "model_messages.json")
    with open(msg_path, "w", encoding="utf-8") as f:
        json.dump([{"role": "user", "content": "hi"}], f)
    for extra, want in (([], "<B>[user]hi<E>"), (["--eos-token", "!"], "<B>[user]hi!")):
        r = subprocess.run([args.sampan, "render-chat", "--model", model_dir, "--messages", msg_path] + extra,
                           capture_output=True, timeout=RUN_TIMEOUT_S)
        got = r.stdout.decode("utf-8", "replace")
        if r.returncode == 0 and got == want:
            passed += 1
            print(f"ok   --model tokenizer_config.json {extra}")
        else:
            failed += 1
            print(f"FAIL --model tokenizer_config.json {extra}: exit {r.returncode}, got {got!r}, "
                  f"stderr {r.stderr.decode('utf-8', 'replace').strip()!r}")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
