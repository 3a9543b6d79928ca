"""Dollars from the figures tests/bench/cost.py measured: each workload's cost per
million steps item by item (orchestrator/prices.py), the same workload's on AWS Step
Functions (Standard, Express) and Lambda durable functions, the sweeper's busy minute, and
the text report.

How the alternatives are counted (their own charges only; the user's functions apart):
- Step Functions Standard: a no-op step is one Task state, one state transition; a
  fan-out is one Map state more, each iteration's Task one transition; no Pass, Choice
  or Succeed states.
- Step Functions Express: one request per run, and the run's duration: its critical
  path of Tasks, each a synchronous invoke of a warm no-op function taken at
  EXPRESS_TASK_SECONDS (an assumption), rounded up to 100 ms, at 64 MB (the smallest
  memory chunk); an inline Map runs at most MAP_CONCURRENCY iterations at once.
- Lambda durable functions: one durable operation per step (context.step), its result
  checkpointed (the no-op's output: the record's own overhead is not published) and
  retained 14 days (the default retention), one invocation per run, and the same billed
  wait on each step's function as our worker's (the step calls the same function). For
  a durable workload (D1, D2) the steps run inside the workflow's own function on both
  sides, which is the user's compute, left out on both: no wait is added.

Targets: DAG steps at TARGET dollars per million; durable steps at DURABLE_TARGET, with at
most DURABLE_REQUESTS AWS requests per durable step at every size (issue 21)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from orchestrator.prices import ADDED, PRICES, PRICES_DATE

__all__ = ["DURABLE_REQUESTS", "DURABLE_TARGET", "MAP_CONCURRENCY", "TARGET", "compare",
           "price_all", "render", "sweeper_minute"]

TARGET = 2.50  # dollars per million no-op steps, all-in
DURABLE_TARGET = 2.00  # dollars per million durable no-op steps, all-in
DURABLE_REQUESTS = 1.2  # AWS requests per durable step, every role's
LOG_BYTES = 350  # START, END and REPORT lines of one invocation (as infra/idle_cost.py)
EXPRESS_TASK_SECONDS = 0.020
EXPRESS_GB = 64 / 1024
MAP_CONCURRENCY = 40
DURABLE_RETENTION_MONTHS = 14 / 30


def sweeper_minute(pass_seconds: float, timeout: float, interval: float,
                   margin: float) -> tuple[int, float]:
    """(passes, billed seconds) of one busy sweeper invocation, by the handler's loop
    (orchestrator/lambda_handlers.py: a pass, then a sleep to the next interval, while
    more than one interval plus the margin would be left)."""
    t, passes = 0.0, 0
    while True:
        t += pass_seconds
        passes += 1
        wait = max(0.0, interval - pass_seconds)
        if timeout - t - wait < interval + min(margin, interval):
            return passes, t
        t += wait


def price_all(results: dict[str, Any]) -> None:
    """Dollars per million steps, item by item, and the comparisons, for each workload."""
    p = PRICES
    minute = results["sweeper"]["busy_minute"]
    minute_cost = {
        "DynamoDB writes": minute["wru"] * p["dynamodb_write_unit"],
        "DynamoDB reads": minute["rru"] * p["dynamodb_read_unit"],
        "SQS": minute["sqs_billed"] * p["sqs_request"],
        "Lambda requests": p["lambda_request"],
        "Lambda GB-s": minute["gb_s"] * p["lambda_gb_second"],
        "logs": LOG_BYTES / 1e9 * p["logs_ingest_gb"],
    }
    minute["dollars"] = {k: round(v, 7) for k, v in minute_cost.items()}
    minute["dollars_total"] = sum(minute_cost.values())
    results["sweeper"]["dollars_per_busy_hour"] = round(60 * minute["dollars_total"], 4)
    # The invocation, its duration and its logs are paid by the minute whatever the load;
    # its DynamoDB and SQS requests grow with it (each finished step's wake is read): they
    # are spread over the load they were measured at, the rest over --steps-per-second.
    rate = results["steps_per_second"]
    load = results["sweeper"]["measured"]["load_steps_per_s"]
    by_time = sum(v for k, v in minute_cost.items() if k.startswith(("Lambda", "logs")))
    by_load = minute["dollars_total"] - by_time
    sweeper_per_million = by_time * 1e6 / (rate * 60) + by_load * 1e6 / (max(load, 1e-3) * 60)
    results["sweeper"]["per_million_steps"] = {
        "time_based": round(by_time * 1e6 / (rate * 60), 4),
        "load_based": round(by_load * 1e6 / (max(load, 1e-3) * 60), 4)}
    for w in results["workloads"].values():
        price(w, results, sweeper_per_million, TARGET)
    durable = results.get("durable", {})
    for w in durable.values():
        price(w, results, sweeper_per_million, DURABLE_TARGET)
    if durable:
        results["targets"] = {
            f"durable_dollars_per_million_le_{DURABLE_TARGET:g}": all(
                w["target_met"] for w in durable.values()),
            f"durable_dollars_per_million_le_{DURABLE_TARGET:g}_emulator_commits_excluded": all(
                w["emulator_commits"]["target_met_without"] for w in durable.values()),
            f"durable_requests_per_step_le_{DURABLE_REQUESTS:g}": all(
                w["requests_target_met"] for w in durable.values()),
        }


def price(w: dict[str, Any], results: dict[str, Any], sweeper_per_million: float,
          target: float) -> None:
    """One workload's dollars per million steps, item by item, its comparisons, and
    whether it meets `target` (and, for a durable one, DURABLE_REQUESTS)."""
    p = PRICES
    rate = results["steps_per_second"]
    s = w["per_step"]
    inv = s["invocations"]
    gbs = s["gb_s"]
    million = {
        "DynamoDB writes": s["wru"] * p["dynamodb_write_unit"],
        "DynamoDB reads": s["rru"] * p["dynamodb_read_unit"],
        "SQS": s["sqs_billed"] * p["sqs_request"],
        "S3": w["s3_requests"] * p["s3_put_request"],
        "Lambda requests": sum(inv.values()) * p["lambda_request"],
        "Lambda GB-s (worker)": gbs.get("worker", 0.0) * p["lambda_gb_second"],
        "Lambda GB-s (api)": gbs.get("api", 0.0) * p["lambda_gb_second"],
        "API Gateway": inv.get("api", 0.0) * p["apigw_http_request"],
        "logs": sum(inv.values()) * LOG_BYTES / 1e9 * p["logs_ingest_gb"],
    }
    million = {k: v * 1e6 for k, v in million.items()}
    million[f"sweeper ({rate:g} steps/s)"] = sweeper_per_million
    total = sum(million.values())
    w["dollars_per_million_steps"] = {k: round(v, 4) for k, v in million.items()}
    w["dollars_per_million_steps_total"] = round(total, 4)
    w["target"] = target
    w["target_met"] = total <= target
    if w.get("durable"):
        w["requests_target_met"] = s["requests_total"] <= DURABLE_REQUESTS
        # The worker's wait on its checkpoint commits is mostly the emulator's: moto
        # deep-copies the whole table for each item of a TransactWriteItems. The same
        # total without that wait (DynamoDB's own latency left out: at 200 ms per
        # transaction of 100, 2 ms a step, it would add $0.017 per million).
        ms = s["aws_wait_ms"].get("TransactWriteItems", 0.0)
        dollars = (ms / 1000 * results["memory_mb"]["worker"] / 1024
                   * p["lambda_gb_second"] * 1e6)
        w["emulator_commits"] = {
            "worker_ms_per_step": ms, "dollars_per_million_steps": round(dollars, 4),
            "total_without": round(total - dollars, 4),
            "target_met_without": total - dollars <= target}
    w["dominant"] = max(million, key=lambda k: million[k])
    w["dominant_share"] = round(million[w["dominant"]] / total, 3)
    wru = sum(w["wru_by_target"].values()) or 1.0
    w["wru_share_by_target"] = {k: round(v / wru, 3) for k, v in w["wru_by_target"].items()}
    w["ten_ms_more_per_step"] = round(0.010 * results["memory_mb"]["worker"] / 1024
                                      * p["lambda_gb_second"] * 1e6, 4)
    w["compare"] = compare(w, p)


def compare(w: dict[str, Any], p: dict[str, float]) -> dict[str, float]:
    """The same workload's dollars per million steps on the alternatives (see the top)."""
    n = w["steps_per_run"]
    maps = 1 if w["critical_path_tasks"] != n else 0
    standard = (n + maps) / n * p["step_functions_standard_transition"]
    seconds = math.ceil(w["critical_path_tasks"] * EXPRESS_TASK_SECONDS * 10) / 10
    express = (p["step_functions_express_request"]
               + seconds * EXPRESS_GB * p["step_functions_express_gb_second"]) / n
    output_gb = len(b'{"ok":true}') / 1e9
    durable = (p["lambda_durable_operation"]
               + output_gb * p["lambda_durable_data_written_gb"]
               + output_gb * DURABLE_RETENTION_MONTHS
               * p["lambda_durable_data_retained_gb_month"]
               + p["lambda_request"] / n)
    if not w.get("durable"):  # the step's wait on its function (see the top)
        durable += w["per_step"]["gb_s"].get("worker", 0.0) * p["lambda_gb_second"]
    return {"step_functions_standard": round(standard * 1e6, 3),
            "step_functions_express": round(express * 1e6, 3),
            "lambda_durable_functions": round(durable * 1e6, 3)}


def _pick(*path: str) -> Callable[[dict[str, Any]], float]:
    """A workload's figure at `path` (0 where it has none)."""

    def get(w: dict[str, Any]) -> float:
        node: Any = w
        for part in path:
            node = node.get(part, 0.0) if isinstance(node, dict) else 0.0
        return float(node)

    return get


def render(r: dict[str, Any]) -> str:
    mc = r["moto_consumed_capacity"]
    lines = [f"Prices: orchestrator/prices.py, on-demand us-east-1 of {PRICES_DATE} "
             f"(added entries: {sorted(ADDED)}); memory MB {r['memory_mb']}",
             f"moto's ReturnConsumedCapacity for a {mc['item_bytes']}-byte put: "
             f"{mc['put']['moto']} (AWS's rule: {mc['put']['aws_rule']}): computed from item "
             "sizes"]
    if "transaction" in mc:
        t = mc["transaction"]
        lines.append(f"  and for a TransactWriteItems of puts of {t['item_bytes']} bytes: "
                     f"{t['moto']} (AWS's rule: {t['aws_rule']})")
    lines += _table(r["workloads"], "per step")
    if r.get("durable"):
        lines += _table(r["durable"], "per durable step")
    sw = r["sweeper"]
    lines.append(
        f"sweeper: {sw['measured']['passes']} passes measured ({sw['measured']['pass_ms']} ms "
        f"each, {sw['measured']['load_steps_per_s']} steps/s flowing): per pass "
        f"{sw['per_pass']['wru']:.1f} WRU, {sw['per_pass']['rru']:.1f} RRU; a busy minute: "
        f"{sw['busy_minute']['passes']} passes, {sw['busy_minute']['billed_s']} s billed = "
        f"${sw['busy_minute']['dollars_total']:.6f} (${sw['dollars_per_busy_hour']:.4f} an hour)"
        f"; per million steps at {r['steps_per_second']:g} steps/s: "
        f"{sw['per_million_steps']}")
    if sw["measured"]["errors"]:
        lines.append(f"THE SWEEPER HANDLER RAISED (every invocation would fail on AWS): "
                     f"{sw['measured']['errors']}")
    if "targets" in r:
        lines.append("targets: " + ", ".join(f"{k}={'yes' if v else 'NO'}"
                                             for k, v in r["targets"].items()))
    w = next(iter(r["workloads"].values()))
    lines.append(f"each 10 ms more of worker time per step adds ${w['ten_ms_more_per_step']}/M; "
                 f"cold starts (ms, first invocation): {r['cold_start_ms']}")
    return "\n".join(lines)


def _table(ws: dict[str, Any], title: str) -> list[str]:
    """The figures of the workloads `ws`, one column each, then a line per workload."""
    keys = list(ws)
    lines = ["", f"{title:<26}" + "".join(f"{k:>12}" for k in keys)]

    def row(name: str, get: Callable[[dict[str, Any]], float], fmt: str = "{:>12.3f}") -> None:
        lines.append(f"{name:<26}" + "".join(fmt.format(get(ws[k])) for k in keys))

    row("steps", lambda w: w["steps"], "{:>12d}")
    row("AWS requests", lambda w: w["per_step"]["requests_total"])
    ops = sorted({op for w in ws.values() for op in w["per_step"]["requests"]})
    for op in ops:
        row(f"  {op}", _pick("per_step", "requests", op))
    roles = sorted({role for w in ws.values() for role in w["per_step"]["requests_by_role"]})
    for role in roles:
        row(f"  by {role}", _pick("per_step", "requests_by_role", role))
    row("DynamoDB WRU", lambda w: w["per_step"]["wru"])
    row("DynamoDB RRU", lambda w: w["per_step"]["rru"])
    row("SQS billed requests", lambda w: w["per_step"]["sqs_billed"])
    row("Lambda invocations", lambda w: sum(w["per_step"]["invocations"].values()), "{:>12.4f}")
    row("  worker GB-s", lambda w: w["per_step"]["gb_s"].get("worker", 0.0), "{:>12.5f}")
    row("  api GB-s", lambda w: w["per_step"]["gb_s"].get("api", 0.0), "{:>12.5f}")
    row("  worker ms", lambda w: w["per_step"]["ms"].get("worker", 0.0), "{:>12.2f}")
    row("  AWS waits ms (all)", lambda w: sum(w["per_step"]["aws_wait_ms"].values()),
        "{:>12.2f}")
    if any(w.get("durable") for w in ws.values()):
        row("durable calls", lambda w: w["per_step"]["durable_calls"], "{:>12.4f}")
    lines.append("")
    lines.append("$ per million steps")
    items = list(next(iter(ws.values()))["dollars_per_million_steps"])
    for item in items:
        row(f"  {item}", _pick("dollars_per_million_steps", item), "{:>12.4f}")
    row("TOTAL", lambda w: w["dollars_per_million_steps_total"], "{:>12.3f}")
    row("  Step Functions Std", lambda w: w["compare"]["step_functions_standard"], "{:>12.2f}")
    row("  Step Functions Expr", lambda w: w["compare"]["step_functions_express"], "{:>12.3f}")
    row("  Lambda durable fns", lambda w: w["compare"]["lambda_durable_functions"], "{:>12.3f}")
    lines.append("")
    for k in keys:
        w = ws[k]
        shares = ", ".join(f"{t} {v:.0%}" for t, v in w["wru_share_by_target"].items()
                           if v >= 0.02)
        top = ", ".join(f"{t} {v}" for t, v in list(w["wru_by_write"].items())[:4])
        verdict = "meets" if w["target_met"] else "ABOVE"
        if "requests_target_met" in w:
            verdict += (f"; {w['per_step']['requests_total']} requests/step "
                        f"{'within' if w['requests_target_met'] else 'ABOVE'} "
                        f"{DURABLE_REQUESTS:g}")
        lines.append(f"{k}: {w['label']}: ${w['dollars_per_million_steps_total']:.2f}/M "
                     f"({verdict} the ${w['target']:.2f} target); "
                     f"dominant: {w['dominant']} ({w['dominant_share']:.0%}); its WRU by "
                     f"table/index: {shares}; per step by write: {top}")
        waits = ", ".join(f"{op} {ms:.2f}" for op, ms in
                          list(w["per_step"]["aws_wait_ms"].items())[:3])
        lines.append(f"  requests by role: {w['per_step']['requests_by_role']}; "
                     f"AWS waits per step (ms): {waits}")
        if "emulator_commits" in w:
            e = w["emulator_commits"]
            lines.append(f"  of the worker's time per step, {e['worker_ms_per_step']:.2f} ms "
                         f"waiting on the emulator's TransactWriteItems "
                         f"(${e['dollars_per_million_steps']:.3f}/M): without it "
                         f"${e['total_without']:.2f}/M ("
                         f"{'meets' if e['target_met_without'] else 'ABOVE'} the target)")
        if w["failed_conditions"] or w["cancelled_transactions"]:
            lines.append(f"  {w['failed_conditions']} failed conditional writes, "
                         f"{w['cancelled_transactions']} cancelled transactions (costed as "
                         "if committed: an upper bound)")
    return lines
