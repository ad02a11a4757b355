"""Locust user for OpenAI-compatible streaming endpoints, paced by a precomputed open-loop schedule (or closed loop).

Run by the harness (`harness bench-pd`, workloads.loadrun) or by Locust itself:

    locust -f workloads/locustfile.py --host http://127.0.0.1:8000 --headless -u 8 -r 8 -t 60s --request-rate 2
    locust -f workloads/locustfile.py --master --master-bind-host 0.0.0.0 ...   # and on other hosts:
    locust -f workloads/locustfile.py --worker --master-host MASTER

The workload flags (--input-tokens, --dataset, --trace, ...) are the same as bench-pd's; see docs/loadgen.md.
Users are a concurrency cap, not the pacing: each free user takes the next session of this process's
share of the workload, sleeps until its intended send instant (closed loop: sends at once), streams it
(chat or completions, stream: true with stream_options.include_usage) and hands the record to the
process's LoadState. A session's later turns follow the previous turn's end plus its pause. Locust's own
statistics get one event per request for its UI; the run's figures come from the records only.
"""

from __future__ import annotations

import os
from time import perf_counter_ns

import gevent
from locust import FastHttpUser, constant, events, task
from locust.exception import StopUser

from workloads.conversation import Conversation
from workloads.loadstate import wait_state
from workloads.records import build_record
from workloads.stream_client import preconnect, stream_request

STATE_WAIT_S = 120.0  # a worker gets its share from the master after it connected


class OpenAIStreamUser(FastHttpUser):
    """One concurrency slot. host, timeouts and the API key come from the process's LoadState."""

    wait_time = constant(0)
    network_timeout = 600.0
    connection_timeout = 30.0
    max_retries = 0
    concurrency = 1

    @task
    def run_session(self) -> None:
        st = wait_state(STATE_WAIT_S)
        if st is None:
            raise StopUser()
        st.t0_set.wait()
        session = st.next_session()
        if session is None:
            st.users_idle += 1
            raise StopUser()
        http = self.client.client.clientpool.get_client(st.url_split)
        prev_end_ns = None
        conv = Conversation(st.live_replies, session[0]["api"] == "chat")  # each turn's body; live: the replies carried on
        for item in session:
            if st.stopped:
                break
            if item["turn"] == 0 or prev_end_ns is None:
                intended = perf_counter_ns() if st.closed_loop else st.t0_ns + int(item["intended_s"] * 1e9)
            else:
                intended = prev_end_ns + int(item["pause_before_s"] * 1e9)
            # everything that does not depend on the send instant is done before it: the body, and a connection
            # when this user's pool has no idle one (stream_client.preconnect)
            chat = item["api"] == "chat"
            payload, item = conv.request(item, {"model": st.model, "max_tokens": int(item["max_tokens"]), "stream": True,
                                                "stream_options": {"include_usage": True}, "temperature": 0.0, **st.extra_body})
            delay = (intended - perf_counter_ns()) / 1e9
            if delay > 0:
                preconnect(http, delay)
                delay = (intended - perf_counter_ns()) / 1e9
                if delay > 0:
                    gevent.sleep(delay)
            if st.stopped:
                break
            st.begin(item, intended)
            raw = stream_request(http, st.chat_uri if chat else st.completions_uri, payload, st.headers,
                                 chat=chat, timeout_s=st.request_timeout_s, keep_text=conv.live)
            conv.reply(raw)
            rec = build_record(item, raw, t0_ns=st.t0_ns, intended_abs_ns=intended, worker_index=st.worker_index, secret=st.secret)
            st.add_record(rec)
            prev_end_ns = raw["ended_ns"]
            self.environment.events.request.fire(
                request_type="POST", name="chat" if chat else "completions", response_time=rec["e2e_s"] * 1000.0,
                response_length=raw["body_bytes"], context={},
                exception=None if rec["error_class"] == "ok" else RuntimeError(f"{rec['error_class']}: {(rec['error_detail'] or '')[:80]}"),
            )


@events.init_command_line_parser.add_listener
def _harness_arguments(parser, **_kw) -> None:
    from workloads.locust_plugin import add_locust_arguments

    add_locust_arguments(parser)


@events.init.add_listener
def _harness_init(environment, runner=None, **_kw) -> None:
    """Plain `locust -f`: set up this process's side of the run (local, master or worker) from Locust's options."""
    from workloads.locust_plugin import attach

    attach(environment)


if os.environ.get("HARNESS_LOAD_CONFIG"):
    # a process given a ready load config (an external driver): set up its state the same way
    from workloads.loadstate import state_from_config_file

    state_from_config_file(os.environ["HARNESS_LOAD_CONFIG"])
