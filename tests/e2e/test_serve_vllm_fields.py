#!/usr/bin/env python3
"""vLLM's extension fields on the OpenAI routes of `sampan serve`, against references.

Clients written for vLLM's OpenAI server send fields OpenAI does not have; each is either done
as vLLM does it or refused with a 400 naming it, never ignored. Checks:
  * guided_choice (completions, chat): every reply is one of the choices, ended by the model's
    end of sequence; guided_regex: every reply fully matches the pattern (Python's
    re.fullmatch), on KServe v2 REST too; guided_json (a schema object, or its text): every
    reply validates with Python's jsonschema;
  * chat_template_kwargs and documents reach the template, add_generation_prompt false leaves
    the turn out, continue_final_message cuts the text after the last message's content (as
    transformers does): the prompt the server tokenised (read back through prompt_logprobs)
    equals jinja2's rendering of the same template, tokenised by `tokenizers`;
  * include_stop_str_in_output: the greedy text cut after the stop string (before it without);
    skip_special_tokens false: a special token's text as `tokenizers` decodes it;
  * refusals: two guided fields, a guided field beside a JSON response_format, guided_grammar,
    a bad regex or choice list, continue_final_message with add_generation_prompt, template
    variables that are request fields, and the sampling fields Sampan does not implement
    (min_tokens above 0, use_beam_search, ...), which pass at vLLM's defaults.
"""

import json
import os
import re
import shutil
import sys

import jinja2
import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402
import serve_util as su  # noqa: E402

# A template using variables beyond messages (as Qwen3's enable_thinking, and RAG documents);
# `trim` on the content so that continue_final_message meets trailing spaces the template drops.
TEMPLATE = ("{{ bos_token }}{% if documents is defined %}{% for d in documents %}doc: "
            "{{ d.text }}\n{% endfor %}{% endif %}{% if enable_thinking is defined and not "
            "enable_thinking %}/no_think\n{% endif %}{% for message in messages %}"
            "{{ message['role'] }}: {{ message['content'] | trim }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                 "maximum": 99},
                                           "c": {"enum": ["red", "blue"]}},
          "required": ["n", "c"], "additionalProperties": False}
REGEX = r"[a-c]{2,4}-\d{1,2}"
CHOICES = ["yes", "no", "maybe so"]
SAMPLED = {"temperature": 1.0, "seed": 5, "n": 3}


def continue_final(text, content):
    """transformers' apply_chat_template(continue_final_message=True) cut, as it documents it:
    at the last occurrence of the stripped final content, keeping its trailing spaces where the
    rendered text kept them."""
    stripped = content.strip()
    at = text.rindex(stripped)
    if text[at:at + len(content.lstrip())] == content.lstrip():
        return text[:at + len(content.lstrip())]
    return text[:at + len(stripped)]


def main():
    args = e2e_util.parse_args(__doc__.split("\n")[0])
    res = e2e_util.Results()
    e2e_util.require_binary(args, res)
    from tokenizers import Tokenizer

    base = su.make_serve_model(args)
    model = os.path.join(args.work_dir, "vllm-fields-model")
    os.makedirs(model, exist_ok=True)
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copyfile(os.path.join(base, f), os.path.join(model, f))
    cfg = json.load(open(os.path.join(base, "tokenizer_config.json")))
    cfg["chat_template"] = TEMPLATE
    with open(os.path.join(model, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    env = jinja2.Environment()
    template = env.from_string(TEMPLATE)

    def post(route, body):
        return su.http_json("POST", url + route, body, timeout=300)

    def refused(name, route, body, field):
        st, b, _ = post(route, body)
        param = b.get("error", {}).get("param") if isinstance(b, dict) else None
        return res.check(f"refused: {name}", st == 400 and param == field,
                         f"{st} {json.dumps(b)[:240]}")

    def replies(name, route, body):
        st, b, _ = post(route, body)
        if not res.check(f"{name}: 200", st == 200, json.dumps(b)[:300]):
            return []
        return [(c["message"]["content"] if "message" in c else c["text"], c["finish_reason"])
                for c in b["choices"]]

    srv = su.Server(args, model, ["--threads", "2"])
    with srv:
        srv.wait_ready()
        url = srv.http_url
        chat_msgs = [{"role": "user", "content": "Pick one"}]

        # ---- guided decoding -------------------------------------------------------------
        for route, body in [("/v1/completions", {"prompt": "Answer:"}),
                            ("/v1/chat/completions", {"messages": chat_msgs})]:
            # Hot sampling (seeded), so that more than one choice comes out.
            out = replies(f"guided_choice on {route}", route,
                          dict(body, guided_choice=CHOICES, max_tokens=16, temperature=3.0,
                               seed=1, n=8))
            res.check(f"guided_choice on {route}: each reply one of the choices, stopped; "
                      "several of them", len(out) == 8 and len({t for t, _ in out}) > 1 and
                      all(t in CHOICES and f == "stop" for t, f in out), str(out))
        out = replies("guided_regex", "/v1/completions",
                      dict(prompt="Code:", guided_regex=REGEX, max_tokens=16, **SAMPLED))
        res.check("guided_regex: each reply a full match (re.fullmatch), stopped",
                  len(out) == 3 and all(re.fullmatch(REGEX, t) and f == "stop" for t, f in out),
                  str(out))
        for form, schema in [("object", SCHEMA), ("text", json.dumps(SCHEMA))]:
            out = replies(f"guided_json as {form}", "/v1/chat/completions",
                          dict(messages=chat_msgs, guided_json=schema, max_tokens=40, **SAMPLED))

            def valid(t):
                try:
                    jsonschema.validate(json.loads(t), SCHEMA)
                    return True
                except (ValueError, jsonschema.ValidationError):
                    return False
            res.check(f"guided_json as {form}: each reply valid for jsonschema",
                      len(out) == 3 and all(valid(t) for t, _ in out), str(out))

        # KServe v2 REST reads vLLM's sampling fields too: in `parameters` and in the
        # sampling_parameters tensor.
        st, b, _ = su.http_json("GET", url + "/v1/models")
        name = b["data"][0]["id"] if st == 200 else "?"
        for where in ("parameters", "sampling_parameters"):
            params = {"guided_regex": REGEX, "temperature": 1.0, "seed": 3, "max_tokens": 16}
            body = {"inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES",
                                "data": ["Code:"]}]}
            if where == "parameters":
                body["parameters"] = params
            else:
                body["inputs"].append({"name": "sampling_parameters", "shape": [1],
                                       "datatype": "BYTES", "data": [json.dumps(params)]})
            st, b, _ = su.http_json("POST", f"{url}/v2/models/{name}/infer", body, timeout=300)
            text = b["outputs"][0]["data"][0] if st == 200 else None
            res.check(f"KServe infer, guided_regex in {where}: a full match",
                      isinstance(text, str) and re.fullmatch(REGEX, text) is not None,
                      f"{st} {json.dumps(b)[:300]}")

        refused("guided_json and guided_choice", "/v1/completions",
                {"prompt": "a", "guided_json": SCHEMA, "guided_choice": ["a"]}, "guided_choice")
        refused("guided_json beside response_format json_object", "/v1/chat/completions",
                {"messages": chat_msgs, "guided_json": SCHEMA,
                 "response_format": {"type": "json_object"}}, "guided_json")
        refused("guided_grammar", "/v1/completions",
                {"prompt": "a", "guided_grammar": "root ::= \"a\""}, "guided_grammar")
        refused("guided_whitespace_pattern", "/v1/completions",
                {"prompt": "a", "guided_json": SCHEMA, "guided_whitespace_pattern": " "},
                "guided_whitespace_pattern")
        refused("guided_regex with an open group", "/v1/completions",
                {"prompt": "a", "guided_regex": "(ab"}, "guided_regex")
        refused("guided_regex matching nothing", "/v1/completions",
                {"prompt": "a", "guided_regex": "a^b"}, "guided_regex")
        refused("guided_choice empty", "/v1/completions",
                {"prompt": "a", "guided_choice": []}, "guided_choice")
        refused("guided_choice of numbers", "/v1/completions",
                {"prompt": "a", "guided_choice": [1, 2]}, "guided_choice")
        refused("guided_json not a schema", "/v1/completions",
                {"prompt": "a", "guided_json": 5}, "guided_json")
        refused("guided_json with an unsupported keyword", "/v1/completions",
                {"prompt": "a", "guided_json": {"type": "object", "minProperties": 1}},
                "guided_json")

        # ---- the chat template's inputs ---------------------------------------------------
        def prompt_check(name, body, want_text):
            """The server's prompt, read back through prompt_logprobs (each entry holds the
            prompt token's id), against `want_text` tokenised by `tokenizers`."""
            want = tok.encode(want_text, add_special_tokens=False).ids
            st, b, _ = post("/v1/chat/completions", dict(body, prompt_logprobs=0, max_tokens=1))
            plp = b.get("prompt_logprobs") if st == 200 else None
            ok = isinstance(plp, list) and len(plp) == len(want) and plp[0] is None and \
                all(str(want[t]) in plp[t] for t in range(1, len(want))) and \
                b["usage"]["prompt_tokens"] == len(want)
            res.check(f"{name}: the prompt is jinja2's rendering", ok,
                      f"{st} want {len(want)} tokens of {want_text!r}; got "
                      f"{json.dumps(b)[:300]}")

        docs = [{"text": "the sky is blue"}, {"text": "grass is green"}]
        prompt_check("chat_template_kwargs and documents",
                     {"messages": chat_msgs, "chat_template_kwargs": {"enable_thinking": False},
                      "documents": docs},
                     template.render(messages=chat_msgs, bos_token=cfg["bos_token"],
                                     add_generation_prompt=True, enable_thinking=False,
                                     documents=docs))
        prompt_check("add_generation_prompt false",
                     {"messages": chat_msgs, "add_generation_prompt": False},
                     template.render(messages=chat_msgs, bos_token=cfg["bos_token"],
                                     add_generation_prompt=False))
        for content in ["The answer is ", "The answer is"]:
            msgs = chat_msgs + [{"role": "assistant", "content": content}]
            full = template.render(messages=msgs, bos_token=cfg["bos_token"],
                                   add_generation_prompt=False)
            prompt_check(f"continue_final_message, final content {content!r}",
                         {"messages": msgs, "add_generation_prompt": False,
                          "continue_final_message": True}, continue_final(full, content))

        refused("continue_final_message with add_generation_prompt", "/v1/chat/completions",
                {"messages": chat_msgs, "continue_final_message": True},
                "continue_final_message")
        refused("chat_template_kwargs not an object", "/v1/chat/completions",
                {"messages": chat_msgs, "chat_template_kwargs": [1]}, "chat_template_kwargs")
        refused("chat_template_kwargs setting messages", "/v1/chat/completions",
                {"messages": chat_msgs, "chat_template_kwargs": {"messages": []}},
                "chat_template_kwargs")
        refused("documents not a list of objects", "/v1/chat/completions",
                {"messages": chat_msgs, "documents": ["a"]}, "documents")
        refused("chat_template", "/v1/chat/completions",
                {"messages": chat_msgs, "chat_template": "{{ 1 }}"}, "chat_template")
        refused("chat echo", "/v1/chat/completions", {"messages": chat_msgs, "echo": True},
                "echo")

        # ---- detokenisation: include_stop_str_in_output, skip_special_tokens -------------
        st, b, _ = post("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 12,
                                            "temperature": 0, "ignore_eos": True})
        greedy = b["choices"][0]["text"] if st == 200 else ""
        stop = greedy[len(greedy) // 3:len(greedy) // 3 + 3]
        cut = greedy.find(stop)
        for include in (False, True):
            st, b, _ = post("/v1/completions", {
                "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0,
                "ignore_eos": True, "stop": [stop], "include_stop_str_in_output": include})
            want = greedy[:cut + len(stop)] if include else greedy[:cut]
            got = b["choices"][0] if st == 200 else {}
            res.check(f"include_stop_str_in_output {include}: the greedy text cut "
                      f"{'after' if include else 'before'} the stop string",
                      len(stop) == 3 and cut > 0 and got.get("text") == want and
                      got.get("finish_reason") == "stop", f"{stop!r} in {greedy!r}: {got}")
        # <unk> (a special token) forced by logit_bias: its text only when asked for, as
        # `tokenizers` decodes it.
        unk = tok.token_to_id("<unk>")
        for skip in (True, False):
            st, b, _ = post("/v1/completions", {
                "prompt": "a", "max_tokens": 2, "temperature": 0, "ignore_eos": True,
                "logit_bias": {str(unk): 100}, "skip_special_tokens": skip})
            want = tok.decode([unk, unk], skip_special_tokens=skip)
            got = b["choices"][0]["text"] if st == 200 else None
            res.check(f"skip_special_tokens {skip}: {want!r} (tokenizers' decode)",
                      got == want and (want == "") == skip, f"{st} {got!r}")

        # ---- sampling fields Sampan does not implement: only vLLM's defaults pass ----------
        for field, default, other in [("min_tokens", 0, 4),
                                      ("use_beam_search", False, True),
                                      ("length_penalty", 1.0, 0.5),
                                      ("priority", 0, 1),
                                      ("return_tokens_as_token_ids", False, True)]:
            for route, body in [("/v1/completions", {"prompt": "a"}),
                                ("/v1/chat/completions", {"messages": chat_msgs})]:
                st, b, _ = post(route, dict(body, max_tokens=1, **{field: default}))
                res.check(f"{field} at its default {default!r} on {route}: 200", st == 200,
                          json.dumps(b)[:200])
                refused(f"{field} {other!r} on {route}", route,
                        dict(body, max_tokens=1, **{field: other}), field)
        for field, value in [("truncate_prompt_tokens", 4), ("allowed_token_ids", [1, 2]),
                             ("bad_words", ["a"]), ("logits_processors", ["x"])]:
            refused(field, "/v1/completions", {"prompt": "a", field: value}, field)
        refused("add_special_tokens true on chat", "/v1/chat/completions",
                {"messages": chat_msgs, "add_special_tokens": True}, "add_special_tokens")

        st, _, _ = su.http_json("GET", url + "/health")
        res.check("server healthy after all of it", st == 200, str(st))
    res.finish()


if __name__ == "__main__":
    main()
