"""Pure parts of the API and the CLI: the job file, edge validation with field paths, page tokens,
field-path sanitising, explanations without a decision, and stub generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.catalog.decisions import CandidateScore, JobPlaced, JobRetriesExhausted, JobRetryScheduled, ReplicaPlacement
from events.catalog.jobs import JobKind, JobSubmitted, PriorityClass
from events.wire.envelope import format_time
from services.api import codegen, validation
from services.api.convert import waited_ms
from services.api.errors import InvalidArgument, field_path
from services.api.explain import explain
from services.api.jobs import shape_warnings
from services.api.pb import jobs_pb2
from services.cli import jobfile
from services.scheduler.core.policy import Preempt, Queue, schedule
from tests.api.support import spec
from tests.scheduler.builders import a_job, a_node, running, snapshot
from tests.unit.events.catalog_samples import sample


def test_a_job_file_becomes_a_spec_with_durations_template_and_labels() -> None:
    parsed, request_id = jobfile.parse(
        """
name: n
tenant: t
resources: {gpus: 1, gpu_models: [A100-80G, H100]}
expected_runtime: 1h30m
max_runtime_s: 7200
template: {image: "x:1", args: [1, 2]}
labels: {team: nlp, tier: 2}
tolerations: [{key: gpu, effect: NoSchedule}]
client_request_id: run-7
"""
    )
    assert (parsed.name, parsed.tenant, request_id) == ("n", "t", "run-7")
    assert (parsed.expected_runtime_s, parsed.max_runtime_s) == (5400, 7200)
    assert list(parsed.resources.gpu_models) == ["A100-80G", "H100"]
    assert json.loads(parsed.template_json) == {"image": "x:1", "args": [1, 2]}
    assert dict(parsed.labels) == {"team": "nlp", "tier": "2"}
    assert parsed.tolerations[0].effect == "NoSchedule" and not parsed.tolerations[0].HasField("value")
    assert not parsed.HasField("replicas") and not parsed.HasField("preemptible")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: n\ngpu: 1", "gpu"),
        ("name: n\nresources: {gpu: 1}", "resources.gpu"),
        ("name: n\nreplicas: two", "replicas"),
        ("name: n\ngang: 'yes'", "gang"),
        ("name: n\nexpected_runtime: soon", "expected_runtime"),
        ("name: n\ndatasets: c4", "datasets"),
        ("- a list", "(file)"),
        ("name: [unclosed", "(file)"),
        ("name: n\nreplicas: 99999999999", "replicas"),
        ("name: n\ninterconnect: rdma\ninterconnect_required: 'yes'", "interconnect_required"),
        ("name: n\nretry: {on_node_failure: 1}", "retry.on_node_failure"),
        ("name: n\nretry: {on_application_failure: often}", "retry.on_application_failure"),
        ("name: n\nretry: 3", "retry"),
    ],
)
def test_a_bad_job_file_names_the_field(text: str, field: str) -> None:
    with pytest.raises(jobfile.JobFileError) as caught:
        jobfile.parse(text)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (spec(resources=jobs_pb2.Resources(gpus=65)), "resources.gpus"),
        (spec(resources=jobs_pb2.Resources(gpus=1, gpu_models=["bad model!"])), "resources.gpu_models.0"),
        (spec(replicas=0), "replicas"),
        (spec(template_json="{"), "template_json"),
        (spec(template_json=json.dumps({"n": 2**60})), "template_json"),
        (spec(labels={"bad key!": "v"}), "labels.bad key!.[key]"),
        (spec(expected_runtime_s=10, max_runtime_s=5), "spec"),
        (jobs_pb2.JobSpec(name="n", tenant="t"), "resources"),
        (spec(resources=jobs_pb2.Resources(gpu_models=["A100-80G"])), "resources"),  # asks for nothing
        (spec(name=""), "name"),
        (spec(tenant=""), "tenant"),
        (spec(interconnect_required=True), "interconnect_required"),  # requires no interconnect
        (spec(interconnect="infiniband", interconnect_required=True), "interconnect"),
        (spec(retry=jobs_pb2.RetrySpec(on_application_failure=101)), "retry.on_application_failure"),
        (spec(retry=jobs_pb2.RetrySpec(on_application_failure=-1)), "retry.on_application_failure"),
        (spec(resources=jobs_pb2.Resources(npus=4, gpu_models=["Ascend910B"])), "resources.gpu_models"),
        (spec(resources=jobs_pb2.Resources(npus=4, min_gpu_memory_mib=65536)), "resources.min_gpu_memory_mib"),
        (spec(resources=jobs_pb2.Resources(cpu_milli=1000, npu_models=["Ascend910B"])), "resources"),
    ],
)
def test_edge_validation_names_the_field_as_the_catalogue_does(bad: jobs_pb2.JobSpec, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        body = validation.job_spec_body(bad)
        validation.asks_for_something(validation.event_from(JobSubmitted, {**body, "job_id": "j-1"}))
    assert caught.value.field == field
    assert "at least 1 character" not in str(caught.value)  # a missing field is said to be missing


def test_a_required_interconnect_goes_from_the_job_file_to_the_event() -> None:
    parsed, _ = jobfile.parse(
        "name: n\ntenant: t\nresources: {gpus: 8}\nreplicas: 4\ninterconnect: rdma\ninterconnect_required: true"
    )
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    assert (event.interconnect.value, event.interconnect_required) == ("rdma", True)
    preference = validation.event_from(
        JobSubmitted, {**validation.job_spec_body(spec(interconnect="nvlink")), "job_id": "j-2"}
    )
    assert (preference.interconnect.value, preference.interconnect_required) == ("nvlink", False)


def test_a_job_file_names_npu_models_apart_from_gpu_models() -> None:
    parsed, _ = jobfile.parse(
        "name: n\ntenant: t\nresources: {npus: 4, npu_models: [Ascend910B], min_npu_memory_mib: 65536}"
    )
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    r = validation.asks_for_something(event).resources
    assert (r.npus, r.npu_models, r.min_npu_memory_mib, r.gpu_models) == (4, ("Ascend910B",), 65536, ())


def test_defaults_come_from_the_catalogue() -> None:
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(spec()), "job_id": "j-1"})
    assert (event.replicas, event.preemptible, event.queue, event.kind.value) == (1, True, "default", "batch")
    assert event.retry.on_application_failure == 0


def test_a_job_file_asks_for_retries_after_its_own_failures_and_the_api_keeps_them() -> None:
    parsed, _ = jobfile.parse("name: n\ntenant: t\nresources: {gpus: 1}\nretry: {on_application_failure: 2}\n")
    assert parsed.retry.on_application_failure == 2
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    assert event.retry.on_application_failure == 2


def test_page_tokens_continue_only_the_query_they_came_from() -> None:
    query = {"tenant": "a", "statuses": ["queued"]}
    token = validation.encode_page_token(query, [123, "j-9"])
    assert validation.decode_page_token(token, query, 2) == [123, "j-9"]
    assert validation.decode_page_token("", query, 2) is None
    for bad, other in ((token, {"tenant": "b"}), ("garbage!", query), (token[:-3], query), (token + "x" * 3000, query)):
        with pytest.raises(InvalidArgument) as caught:
            validation.decode_page_token(bad, other, 2)
        assert caught.value.field == "page_token"


def test_field_paths_are_cut_to_what_a_job_rejected_may_carry() -> None:
    assert field_path("resources.gpus") == "resources.gpus"
    assert field_path("labels.bad key!.[key]") == "labels"
    assert field_path("é") is None


def test_an_explanation_without_a_decision_says_so() -> None:
    row = {"entity_key": "j-1", "status": "submitted", "timeline": [], "last_decision": None, "last_decision_type": ""}
    answer = explain(row, 0)
    assert answer.question == "unknown" and "no decision" in answer.summary[0]
    row.update(last_decision={"job_id": "j-1", "from": "the future"}, last_decision_type="JobQueued")
    assert "cannot read" in explain(row, 0).summary[0]


def test_an_explanation_of_a_retry_gives_the_scheduler_s_words_and_when_it_may_start() -> None:
    retry = sample(JobRetryScheduled)
    row = {
        "entity_key": retry.job_id,
        "status": "queued",
        "timeline": [],
        "last_decision": json.loads(retry.model_dump_json()),
        "last_decision_type": "JobRetryScheduled",
    }
    answer = explain(row, 0)
    assert answer.question == "waiting" and answer.summary[0].startswith("Retry 1 of 3 after node")
    assert f"placed again from {format_time(retry.not_before_ms)}" in answer.summary[0]
    gave_up = sample(JobRetriesExhausted)
    row.update(
        status="failed",
        last_reason="RetriesExhausted",
        last_decision=json.loads(gave_up.model_dump_json()),
        last_decision_type="JobRetriesExhausted",
    )
    answer = explain(row, 0)
    assert answer.question == "finished" and answer.summary[0].startswith(
        "The job has ended: failed (RetriesExhausted)"
    )
    assert answer.summary[1] == gave_up.message[:1].upper() + gave_up.message[1:] + "."


def test_stubs_are_generated_with_package_imports_and_not_twice(tmp_path: Path) -> None:
    written = codegen.generate(tmp_path)
    names = {path.name for path in written}
    assert {"jobs_pb2.py", "jobs_pb2.pyi", "jobs_pb2_grpc.py", "audit_pb2.py"} <= names
    audit = (tmp_path / "fedsched" / "v1" / "audit_pb2.py").read_text()
    assert "from services.api.gen.fedsched.v1 import jobs_pb2" in audit
    assert "from fedsched.v1" not in audit and audit.startswith("# Generated by services.api.codegen")
    assert codegen.up_to_date(tmp_path) and codegen.generate(tmp_path) == []


def test_an_explanation_says_who_made_room_for_a_job_and_why_another_was_stopped() -> None:
    """The scheduler's own words, as a cycle writes them: the preemptor waits for named jobs to stop;
    the stopped job's request says for whom and by which rule."""
    node = a_node("n1").gpus(8, (0,) * 8).build()
    victim = a_job("be").gpus(8).priority(PriorityClass.BEST_EFFORT).kind(JobKind.BATCH).build()
    held = running(victim, "cluster-a", ("n1", tuple(range(8)), 1000), started_ms=0)
    urgent = a_job("crit").gpus(8).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    result = schedule(snapshot([node], [urgent], [held]))
    waits = next(d for d in result.decisions if isinstance(d, Queue))
    stop = next(d for d in result.decisions if isinstance(d, Preempt))
    placed = JobPlaced(
        job_id="crit",
        cycle_id="cycle-2",
        cluster="cluster-a",
        replicas=(ReplicaPlacement(replica=0, node="n1", gpu_indices=tuple(range(8)), gpu_milli_each=1000),),
        chosen=CandidateScore(cluster="cluster-a", total=0),
        explanation="placed",
        victims=(stop.victim,),
    )
    preemptor = {
        "entity_key": "crit",
        "status": "placed",
        "timeline": [
            [1, "submitted", "JobSubmitted", "Submitted", ""],
            [2, "queued", "JobQueued", ",".join(r.value for r in waits.reasons), waits.message],
            [3, "placed", "JobPlaced", "Placed", "placed"],
        ],
        "last_decision": json.loads(placed.model_dump_json()),
        "last_decision_type": "JobPlaced",
    }
    text = "\n".join(explain(preemptor, 0).summary)
    assert "Room was made for it first: 1 job(s) asked to stop: be." in text
    assert list(explain(preemptor, 0).placement.victims) == ["be"]

    stopped = {
        "entity_key": "be",
        "status": "queued",
        "timeline": [
            [0, "placed", "JobPlaced", "Placed", ""],
            [2, "running", "JobPreemptionRequested", stop.rule.value, stop.message],
            [3, "queued", "JobPreempted", "Preempted", ""],
        ],
        "last_decision": None,
        "last_decision_type": "",
    }
    text = "\n".join(explain(stopped, 0).summary)
    latest = "the latest at 1970-01-01T00:00:00.003Z"
    assert f"Stopped 1 time(s) to make room; {latest}: PriorityPreemption - {stop.message}" in text
    assert "crit" in stop.message  # for whom


def test_the_cli_prints_64_bit_integers_as_numbers() -> None:
    from services.cli.people_cmd import to_dict

    explanation = jobs_pb2.Explanation(job_id="j-1", waiting_ms=1500, runs=2)
    explanation.wait.binding.requested = 64_000
    explanation.wait.why_not.add(cluster="c1")
    explanation.preemptions.add(time_ms=1_767_225_600_000, event="JobPreempted")
    out = to_dict(explanation)
    assert out["waiting_ms"] == 1500 and out["runs"] == 2  # int64 and int32 alike
    assert out["wait"]["binding"]["requested"] == 64_000 and out["wait"]["binding"]["available"] == 0
    assert out["preemptions"][0]["time_ms"] == 1_767_225_600_000
    job = to_dict(jobs_pb2.Job(job_id="j-1", gpu_milli=4000, submitted_ms=5))
    assert (job["gpu_milli"], job["submitted_ms"]) == (4000, 5)


def test_a_waiting_job_has_waited_until_now_and_a_placed_one_until_its_placement() -> None:
    waiting = {"status": "queued", "waiting_ms": 5_000, "queued_since_ms": 10_000}
    assert waited_ms(waiting, 70_000) == 65_000
    assert waited_ms({**waiting, "status": "placed", "queued_since_ms": None}, 70_000) == 5_000
    assert waited_ms({**waiting, "status": "cancelled"}, 70_000) == 5_000  # ended: its wait is over
    assert waited_ms(waiting, 9_000) == 5_000  # a clock behind the log's adds nothing, takes nothing


def test_a_shape_the_fleet_cannot_run_is_warned_about_with_what_it_has() -> None:
    fleet = {"A100": 8, "T4": 4}
    assert shape_warnings(["A100"], 8, fleet) == [] and shape_warnings([], 0, {}) == []
    assert shape_warnings([], 64, {}) == []  # the fleet not known yet: nothing to say
    [any_model] = shape_warnings([], 16, fleet)
    assert "no node of A100, T4 has 16 GPUs (the largest has 8)" in any_model
    [t4] = shape_warnings(["T4"], 8, fleet)
    assert "no node of T4 has 8 GPUs (the largest has 4)" in t4
    typo, too_big = shape_warnings(["a100", "T4"], 6, fleet)
    assert "did you mean A100?" in typo and "no node of T4 has 6 GPUs" in too_big


def test_a_service_that_says_only_its_minimum_replicas_is_accepted_in_one_cluster() -> None:
    # `inference: {min_replicas: 2}` in a job file: proto3 gives the unset spread_clusters as 0.
    parsed = jobs_pb2.JobSpec(
        name="serve", tenant="team-a", kind="inference", replicas=4, inference=jobs_pb2.InferenceSpec(min_replicas=2)
    )
    parsed.resources.gpus = 1
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    assert isinstance(event, JobSubmitted)
    assert (event.inference.min_replicas, event.inference.spread_clusters) == (2, 1)


@pytest.mark.parametrize(
    ("more", "field", "words"),
    [
        (
            {"inference": jobs_pb2.InferenceSpec(min_replicas=3, spread_clusters=2)},
            "inference.min_replicas",
            "at most 2",
        ),
        (
            {"inference": jobs_pb2.InferenceSpec(min_replicas=1, spread_clusters=2), "gang": True},
            "gang",
            "part by part",
        ),
        (
            {
                "inference": jobs_pb2.InferenceSpec(min_replicas=1, spread_clusters=2),
                "interconnect": "nvlink",
                "interconnect_required": True,
            },
            "interconnect_required",
            "never spans clusters",
        ),
    ],
)
def test_a_service_spread_over_clusters_that_could_never_start_as_asked_is_refused(
    more: dict[str, object], field: str, words: str
) -> None:
    parsed = jobs_pb2.JobSpec(name="serve", tenant="team-a", kind="inference", replicas=4, **more)  # type: ignore[arg-type]
    parsed.resources.gpus = 1
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    with pytest.raises(InvalidArgument) as caught:
        validation.spreads_as_it_can(event)
    assert caught.value.field == field and words in str(caught.value)


def test_a_service_spread_within_its_cap_is_accepted_with_no_warning() -> None:
    parsed = jobs_pb2.JobSpec(
        name="serve",
        tenant="team-a",
        kind="inference",
        replicas=4,
        inference=jobs_pb2.InferenceSpec(min_replicas=2, spread_clusters=2),
    )
    parsed.resources.gpus = 1
    event = validation.event_from(JobSubmitted, {**validation.job_spec_body(parsed), "job_id": "j-1"})
    assert validation.spreads_as_it_can(event) is event
