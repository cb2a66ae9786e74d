"""Static checks of the Kubernetes manifests under k8s/, the Dockerfile and .dockerignore.

No cluster, network or Docker is needed: the files are parsed and cross-checked.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
README = K8S / "README.md"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

PROJECT_IMAGE = "ghcr.io/mooring-fl/mooring:0.1.0"
# Third-party images allowed besides the project image, with the only manifest using each.
THIRD_PARTY_IMAGES = {"postgres:16.4-bookworm": "postgres.yaml"}
EXAMPLE_SECRET = "secret.example.yaml"
SECRET_NAME = "mooring-secrets"
# Manifests kustomization.yaml must not list: placeholders only / a one-off job.
NOT_IN_KUSTOMIZATION = {EXAMPLE_SECRET, "rayjob.yaml", "kustomization.yaml"}

SECRET_NAME_MARKERS = ("PASSWORD", "TOKEN", "SECRET", "KEY")
PLACEHOLDER = re.compile(r"^(REPLACE[_-]?ME|CHANGE[_-]?ME|<[^<>]+>|\.\.\.)$", re.IGNORECASE)
ENV_REF = re.compile(r"^\$(\(\w+\)|\{\w+\}|\w+)$")  # $(VAR) (Kubernetes), ${VAR} or $VAR
K8S_VAR_REF = re.compile(r"\$\((\w+)\)")
DB_URL = re.compile(
    r"postgres(?:ql)?(?:\+\w+)?://(?P<user>[^:@/\s]+):(?P<password>[^@\s]+)@(?P<host>[^:/\s]+)(?::(?P<port>\d+))?/(?P<db>\w+)"
)


# ----------------------------------------------------------------------------- helpers


def manifest_paths() -> list[Path]:
    return sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml"))


@functools.cache
def load_docs(path: Path) -> list[dict[str, Any]]:
    """Parsed documents of one manifest (cached: the tests only read them)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as fh:
        return [doc for doc in yaml.load_all(fh, Loader=loader) if doc is not None]


def all_objects(include_example: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in manifest_paths():
        if path.name == EXAMPLE_SECRET and not include_example:
            continue
        for doc in load_docs(path):
            yield path.name, doc


def objects_of_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, obj) for name, obj in all_objects() if obj.get("kind") == kind]


def the_one(kind: str) -> dict[str, Any]:
    found = objects_of_kind(kind)
    assert len(found) == 1, f"expected exactly one {kind}, found {len(found)}"
    return found[0][1]


def pod_specs(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every PodSpec-like mapping (one with a `containers` list) anywhere under node."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield where, node
        for key, value in node.items():
            yield from pod_specs(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pod_specs(value, f"{where}[{i}]")


def containers_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def all_containers(include_example: bool = False) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, container, pod spec) for every container in every manifest."""
    out = []
    for fname, obj in all_objects(include_example):
        for where, spec in pod_specs(obj):
            for c in containers_of(spec):
                out.append(
                    (f"{fname}:{obj['kind']}/{obj['metadata']['name']}{where}/{c.get('name')}", c, spec)
                )
    return out


def autoscaler_options() -> dict[str, Any]:
    return the_one("RayCluster")["spec"].get("autoscalerOptions") or {}


def ray_containers() -> list[tuple[str, dict[str, Any]]]:
    cluster = the_one("RayCluster")["spec"]
    groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
    return [(f"{name}/{c['name']}", c) for name, g in groups for c in g["template"]["spec"]["containers"]]


def worker_group(name: str) -> dict[str, Any]:
    groups = {g["groupName"]: g for g in the_one("RayCluster")["spec"]["workerGroupSpecs"]}
    assert name in groups, f"RayCluster has no worker group {name!r} (has {sorted(groups)})"
    return groups[name]


def env_map(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env") or []}


_QUANTITY_SUFFIX = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}


def quantity(value: Any) -> float:
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", str(value))
    assert m and m.group(2) in _QUANTITY_SUFFIX, f"not a Kubernetes quantity: {value!r}"
    return float(m.group(1)) * _QUANTITY_SUFFIX[m.group(2)]


def effective_security(container: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Container securityContext over the pod's (for the fields both levels have)."""
    pod = spec.get("securityContext") or {}
    ctr = container.get("securityContext") or {}
    merged = {k: pod[k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup") if k in pod}
    merged.update(ctr)
    return merged


def cli_subcommands() -> set[str]:
    """The `mooring` subcommands (orchestrator/cli.py's dispatch table)."""
    from orchestrator.commands import COMMANDS

    return set(COMMANDS)


def rayjob() -> dict[str, Any]:
    return the_one("RayJob")


def entrypoint_words() -> list[str]:
    return shlex.split(rayjob()["spec"]["entrypoint"])


# ----------------------------------------------------------------------------- every manifest


def test_k8s_dir_has_the_expected_manifests() -> None:
    names = {p.name for p in manifest_paths()}
    expected = {
        "raycluster.yaml",
        "rayjob.yaml",
        "mlflow.yaml",
        "postgres.yaml",
        EXAMPLE_SECRET,
        "kustomization.yaml",
    }
    assert expected <= names, f"missing: {sorted(expected - names)}"


@pytest.mark.parametrize("path", manifest_paths(), ids=lambda p: p.name)
def test_manifest_parses_and_objects_are_identified(path: Path) -> None:
    docs = load_docs(path)
    assert docs, f"{path.name} has no YAML documents"
    for doc in docs:
        assert isinstance(doc, dict), f"{path.name}: a document is not a mapping"
        assert doc.get("apiVersion"), f"{path.name}: object without apiVersion"
        assert doc.get("kind"), f"{path.name}: object without kind"
        assert (doc.get("metadata") or {}).get("name"), (
            f"{path.name}: {doc.get('kind')} without metadata.name"
        )


def test_object_names_are_unique_per_kind() -> None:
    seen: set[tuple[str, str]] = set()
    for fname, obj in all_objects(include_example=False):
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{fname}: duplicate {key}"
        seen.add(key)


def test_every_container_has_requests_and_limits() -> None:
    containers = all_containers()
    assert containers
    pseudo = [("RayCluster autoscaler sidecar", autoscaler_options(), {})] if autoscaler_options() else []
    for label, c, _ in containers + pseudo:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for kind in ("cpu", "memory"):
            assert kind in requests, f"{label}: no resources.requests.{kind}"
            assert kind in limits, f"{label}: no resources.limits.{kind}"
            assert quantity(requests[kind]) <= quantity(limits[kind]), f"{label}: {kind} request above limit"


def test_every_container_runs_non_root_without_privileges() -> None:
    pseudo = [("RayCluster autoscaler sidecar", autoscaler_options(), {})] if autoscaler_options() else []
    for label, c, spec in all_containers() + pseudo:
        sec = effective_security(c, spec)
        assert sec.get("runAsNonRoot") is True, f"{label}: runAsNonRoot is not true"
        assert isinstance(sec.get("runAsUser"), int) and sec["runAsUser"] != 0, (
            f"{label}: runAsUser must be a non-zero uid"
        )
        ctr = c.get("securityContext") or {}
        assert ctr.get("allowPrivilegeEscalation") is False, f"{label}: allowPrivilegeEscalation is not false"
        assert ctr.get("privileged") is not True, f"{label}: privileged"
        assert "ALL" in ((ctr.get("capabilities") or {}).get("drop") or []), (
            f"{label}: capabilities do not drop ALL"
        )
        if c.get("image", PROJECT_IMAGE) == PROJECT_IMAGE:
            assert sec["runAsUser"] == 1000, f"{label}: the project image runs as uid 1000"


def test_images_are_the_project_image_or_allowed_third_party() -> None:
    readme_images = set(re.findall(r"ghcr\.io/[\w./-]+:[\w.-]+", README.read_text(encoding="utf-8")))
    assert readme_images == {PROJECT_IMAGE}, f"k8s/README.md names images {sorted(readme_images)}"
    used = set()
    for label, c, _ in all_containers():
        image = c.get("image")
        used.add(image)
        if image in THIRD_PARTY_IMAGES:
            assert label.startswith(THIRD_PARTY_IMAGES[image] + ":"), (
                f"{label}: {image} is only allowed in {THIRD_PARTY_IMAGES[image]}"
            )
        else:
            assert image == PROJECT_IMAGE, f"{label}: image {image!r} is not {PROJECT_IMAGE}"
    assert PROJECT_IMAGE in used
    if "image" in autoscaler_options():
        assert autoscaler_options()["image"] == PROJECT_IMAGE


def test_project_image_tag_matches_package_version() -> None:
    version = re.search(
        r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M
    )
    assert version, "no version in pyproject.toml"
    assert PROJECT_IMAGE.rsplit(":", 1)[1] == version.group(1)


def test_services_select_existing_pods() -> None:
    pod_labels = [
        (template.get("metadata") or {}).get("labels") or {}
        for _, obj in all_objects(include_example=False)
        for template in _templates(obj)
    ]
    for fname, svc in objects_of_kind("Service"):
        selector = svc["spec"].get("selector") or {}
        assert selector, f"{fname}: Service {svc['metadata']['name']} has no selector"
        assert any(selector.items() <= labels.items() for labels in pod_labels), (
            f"{fname}: Service {svc['metadata']['name']} selects no pod template"
        )


def _templates(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("spec"), dict) and isinstance(node["spec"].get("containers"), list):
            yield node
        for value in node.values():
            yield from _templates(value)
    elif isinstance(node, list):
        for value in node:
            yield from _templates(value)


# ----------------------------------------------------------------------------- secrets


def test_secret_like_env_vars_come_from_secret_refs() -> None:
    envs = [(label, c.get("env") or []) for label, c, _ in all_containers()]
    envs.append(("RayCluster autoscaler sidecar", autoscaler_options().get("env") or []))
    checked = 0
    for label, env in envs:
        for entry in env:
            if any(marker in entry["name"].upper() for marker in SECRET_NAME_MARKERS):
                checked += 1
                assert "value" not in entry, f"{label}: {entry['name']} has a literal value"
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
                assert ref.get("name") and ref.get("key"), (
                    f"{label}: {entry['name']} must use valueFrom.secretKeyRef"
                )
    assert checked, "expected at least one password env var (PostgreSQL) to check"


def test_no_literal_credentials_in_database_urls() -> None:
    for path in manifest_paths():
        if path.name == EXAMPLE_SECRET:
            continue
        for m in DB_URL.finditer(path.read_text(encoding="utf-8")):
            password = m.group("password")
            assert ENV_REF.match(password) or PLACEHOLDER.match(password), (
                f"{path.name}: literal password in {m.group(0)!r}"
            )


def test_only_the_example_holds_a_secret() -> None:
    for fname, obj in all_objects():
        if obj["kind"] == "Secret":
            assert fname == EXAMPLE_SECRET, f"{fname} contains a Secret; create it with kubectl instead"
        text_fields = {"stringData", "data"} & obj.keys()
        if fname != EXAMPLE_SECRET and obj["kind"] != "ConfigMap":
            assert not text_fields, f"{fname}: {obj['kind']} carries data"


def test_secret_example_is_placeholders_only_and_covers_every_reference() -> None:
    text = (K8S / EXAMPLE_SECRET).read_text(encoding="utf-8")
    assert "EXAMPLE" in text.upper() and "kubectl" in text, "secret.example.yaml must say it is an example"
    secret = next(obj for fname, obj in all_objects() if fname == EXAMPLE_SECRET and obj["kind"] == "Secret")
    assert secret["metadata"]["name"] == SECRET_NAME
    values = {**(secret.get("stringData") or {}), **(secret.get("data") or {})}
    assert values
    for key, value in values.items():
        assert PLACEHOLDER.match(str(value)), f"secret.example.yaml: {key} is not a placeholder"

    refs = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if "secretKeyRef" in node:
                ref = node["secretKeyRef"]
                refs.add((ref["name"], ref["key"], bool(ref.get("optional"))))
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for _, obj in all_objects(include_example=False):
        collect(obj)
    assert refs
    for name, key, _optional in refs:
        assert name == SECRET_NAME, f"secretKeyRef to unknown Secret {name!r}"
        assert key in values, f"secret.example.yaml lacks key {key!r}, referenced by a manifest"


def test_kubernetes_var_references_are_defined_before_use() -> None:
    """$(VAR) is only expanded from env entries listed earlier; otherwise it stays literal."""
    for label, c, _ in all_containers():
        defined: list[str] = []
        for entry in c.get("env") or []:
            for ref in K8S_VAR_REF.findall(str(entry.get("value", ""))):
                assert ref in defined, f"{label}: {entry['name']} uses $({ref}) before it is defined"
            defined.append(entry["name"])
        for arg in list(c.get("command") or []) + list(c.get("args") or []):
            for ref in K8S_VAR_REF.findall(str(arg)):
                assert ref in defined, f"{label}: command/args use undefined $({ref})"


# ----------------------------------------------------------------------------- RayCluster


def test_raycluster_groups() -> None:
    cluster = the_one("RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    assert cluster["metadata"]["name"] == "mooring"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    assert isinstance(head.get("rayStartParams"), dict)
    assert head["template"]["spec"]["containers"]
    groups = spec["workerGroupSpecs"]
    assert {g.get("groupName") for g in groups} >= {"cpu", "gpu"}
    for g in groups:
        for field in ("groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"):
            assert field in g, f"worker group {g.get('groupName')}: no {field}"
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], (
            f"worker group {g['groupName']}: bad replica bounds"
        )
        assert g["template"]["spec"]["containers"]
    for group in [head, *groups]:
        # The CRD types rayStartParams as map[string]string: `num-gpus: 1` would be rejected.
        assert all(isinstance(v, str) for v in group["rayStartParams"].values()), (
            "rayStartParams values must be strings"
        )


def test_cpu_group_scales_between_zero_and_eight() -> None:
    cpu = worker_group("cpu")
    assert (cpu["minReplicas"], cpu["maxReplicas"]) == (0, 8)


def test_gpu_group_requests_and_declares_one_gpu() -> None:
    gpu = worker_group("gpu")
    assert gpu["rayStartParams"].get("num-gpus") == "1"
    for c in gpu["template"]["spec"]["containers"]:
        limits = c["resources"]["limits"]
        assert "nvidia.com/gpu" in limits, "gpu worker without an nvidia.com/gpu limit"
        assert int(limits["nvidia.com/gpu"]) == int(gpu["rayStartParams"]["num-gpus"]) == 1
        requested = c["resources"]["requests"].get("nvidia.com/gpu", limits["nvidia.com/gpu"])
        assert int(requested) == int(limits["nvidia.com/gpu"]), "extended resources need request == limit"
    for c in worker_group("cpu")["template"]["spec"]["containers"]:
        assert "nvidia.com/gpu" not in c["resources"]["limits"]


def test_gcs_fault_tolerance_uses_external_redis_and_a_secret() -> None:
    cluster = the_one("RayCluster")
    ft = cluster["spec"].get("gcsFaultToleranceOptions")
    assert ft, "gcsFaultToleranceOptions missing"
    assert re.fullmatch(r"[\w.-]+:\d+", ft.get("redisAddress", "")), "redisAddress must be host:port"
    ref = ft["redisPassword"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == SECRET_NAME and ref["key"]
    assert "value" not in ft["redisPassword"]
    # KubeRay rejects these when gcsFaultToleranceOptions is set.
    head = cluster["spec"]["headGroupSpec"]
    assert "redis-password" not in head["rayStartParams"]
    assert "ray.io/ft-enabled" not in (cluster["metadata"].get("annotations") or {})
    for c in head["template"]["spec"]["containers"]:
        assert not {"REDIS_PASSWORD", "RAY_REDIS_ADDRESS"} & env_map(c).keys()


def test_head_exposes_the_dashboard() -> None:
    head = the_one("RayCluster")["spec"]["headGroupSpec"]
    ports = [p for c in head["template"]["spec"]["containers"] for p in c.get("ports") or []]
    assert any(p["containerPort"] == 8265 and p.get("name") == "dashboard" for p in ports)


def test_ray_pods_point_at_mlflow_and_the_optuna_database() -> None:
    mlflow_svc = next(svc for _, svc in objects_of_kind("Service") if svc["metadata"]["name"] == "mlflow")
    assert any(p["port"] == 5000 for p in mlflow_svc["spec"]["ports"])
    databases = init_script_databases()
    for label, c in ray_containers():
        env = env_map(c)
        assert env.get("MLFLOW_TRACKING_URI", {}).get("value") == "http://mlflow:5000", (
            f"{label}: MLFLOW_TRACKING_URI"
        )
        storage = env.get("MOORING_OPTUNA_STORAGE", {}).get("value", "")
        m = DB_URL.fullmatch(storage)
        assert m, (
            f"{label}: MOORING_OPTUNA_STORAGE is not a postgresql:// URL built from env vars: {storage!r}"
        )
        assert ENV_REF.match(m.group("password")), (
            f"{label}: MOORING_OPTUNA_STORAGE password must be a $(VAR) reference"
        )
        assert m.group("host") == "postgres" and m.group("db") in databases


def locked_version(package: str) -> str:
    """The version requirements.lock pins for `package` (the lock pins one version per package)."""
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    versions = set(re.findall(rf"^{re.escape(package)}==([^\s;]+)", lock, re.M))
    assert len(versions) == 1, f"requirements.lock pins {package} as {sorted(versions)}"
    return versions.pop()


def test_the_image_cluster_and_instructions_run_the_locks_ray_and_python() -> None:
    ray_version = locked_version("ray")
    python = (ROOT / ".python-version").read_text(encoding="utf-8").strip()
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    m = re.search(r"^ARG\s+RAY_VERSION=(\S+)", dockerfile, re.M)
    assert m and m.group(1) == ray_version, "Dockerfile's RAY_VERSION is not the lock's Ray"
    assert the_one("RayCluster")["spec"]["rayVersion"] == ray_version
    assert re.search(rf"^FROM python:{re.escape(python)}-slim\b", dockerfile, re.M), (
        f"Dockerfile's base image is not Python {python}"
    )
    assert re.search(r"pip install -r requirements\.lock", dockerfile), "the image does not install the lock"
    readme = README.read_text(encoding="utf-8")
    assert f"Python {python} and Ray {ray_version}" in readme, "k8s/README.md does not name the lock's versions"


# ----------------------------------------------------------------------------- RayJob


def test_rayjob_targets_the_cluster() -> None:
    job = rayjob()
    assert job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": the_one("RayCluster")["metadata"]["name"]}
    assert "rayClusterSpec" not in job["spec"]


def test_rayjob_entrypoint_is_a_mooring_subcommand() -> None:
    entrypoint = rayjob()["spec"]["entrypoint"]
    assert entrypoint.startswith("mooring "), entrypoint
    words = entrypoint_words()
    assert words[1] in cli_subcommands(), (
        f"`mooring {words[1]}` is not a CLI subcommand ({sorted(cli_subcommands())})"
    )


def test_rayjob_sweep_uses_the_optuna_storage_variable() -> None:
    words = entrypoint_words()
    assert words[1] == "sweep"
    assert "--storage" in words
    assert words[words.index("--storage") + 1] in {"$MOORING_OPTUNA_STORAGE", "${MOORING_OPTUNA_STORAGE}"}


def test_rayjob_sweep_config_exists() -> None:
    config = entrypoint_words()[2]
    assert config.startswith("configs/sweeps/") and (ROOT / config).is_file(), f"{config} does not exist"


def test_rayjob_shell_variables_are_expanded_on_the_head() -> None:
    """In K8sJobMode a submitter pod runs the entrypoint through `bash -c` and expands $VARs
    itself (empty there, or a leaked secret); HTTPMode hands the string to the head as is."""
    spec = rayjob()["spec"]
    if "$" in spec["entrypoint"]:
        assert spec.get("submissionMode") == "HTTPMode"


def test_rayjob_runtime_env_and_lifecycle() -> None:
    spec = rayjob()["spec"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert isinstance(runtime_env, dict)
    assert runtime_env.get("working_dir"), "runtimeEnvYAML needs a working_dir"
    env_vars = runtime_env.get("env_vars")
    assert isinstance(env_vars, dict) and env_vars, "runtimeEnvYAML needs env_vars"
    for name, value in env_vars.items():
        assert isinstance(value, str), f"env_vars.{name} must be a string"
        assert not any(marker in name.upper() for marker in SECRET_NAME_MARKERS), (
            f"env_vars.{name}: the runtime env is shown in the dashboard; no secrets there"
        )
    assert isinstance(spec.get("shutdownAfterJobFinishes"), bool)
    ttl = spec.get("ttlSecondsAfterFinished")
    assert isinstance(ttl, int) and ttl >= 0
    if ttl > 0:  # KubeRay rejects a TTL without shutdownAfterJobFinishes
        assert spec["shutdownAfterJobFinishes"] is True
    deadline = spec.get("activeDeadlineSeconds")
    assert (isinstance(deadline, int) and deadline > 0) or spec.get("submitterPodTemplate")
    if spec.get("submissionMode") == "HTTPMode":
        assert "submitterPodTemplate" not in spec, "HTTPMode ignores submitterPodTemplate"


# ----------------------------------------------------------------------------- MLflow / PostgreSQL


def init_script_databases() -> set[str]:
    configmaps = [cm for fname, cm in objects_of_kind("ConfigMap") if fname == "postgres.yaml"]
    scripts = " ".join(v for cm in configmaps for v in (cm.get("data") or {}).values())
    return set(re.findall(r"CREATE\s+DATABASE\s+\"?(\w+)", scripts, re.IGNORECASE))


def test_postgres_statefulset_service_volume_and_databases() -> None:
    objs = {
        (obj["kind"], obj["metadata"]["name"]): obj
        for fname, obj in all_objects()
        if fname == "postgres.yaml"
    }
    sts = objs[("StatefulSet", "postgres")]
    assert ("Service", "postgres") in objs
    assert any(p["port"] == 5432 for p in objs[("Service", "postgres")]["spec"]["ports"])
    has_pvc = bool(sts["spec"].get("volumeClaimTemplates")) or any(
        kind == "PersistentVolumeClaim" for kind, _ in objs
    )
    assert has_pvc, "PostgreSQL data needs a PersistentVolumeClaim"
    assert {"mlflow", "optuna"} <= init_script_databases()
    pod = sts["spec"]["template"]["spec"]
    mounts = [m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts") or []]
    assert "/docker-entrypoint-initdb.d" in mounts
    env = env_map(pod["containers"][0])
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == SECRET_NAME


def test_mlflow_server_command_and_service() -> None:
    objs = {
        (obj["kind"], obj["metadata"]["name"]): obj for fname, obj in all_objects() if fname == "mlflow.yaml"
    }
    svc = objs[("Service", "mlflow")]
    assert any(p["port"] == 5000 for p in svc["spec"]["ports"])
    (container,) = objs[("Deployment", "mlflow")]["spec"]["template"]["spec"]["containers"]
    argv = [str(a) for a in list(container.get("command") or []) + list(container.get("args") or [])]
    assert argv[:2] == ["mlflow", "server"], argv

    def option(flag: str) -> str:
        assert flag in argv, f"mlflow server without {flag}"
        return argv[argv.index(flag) + 1]

    assert option("--host") == "0.0.0.0"
    assert option("--port") == "5000"
    # the database password reaches the server through its environment, never its command line
    assert "--backend-store-uri" not in argv and not any("PASSWORD" in a for a in argv), argv
    env_names = [e["name"] for e in container.get("env") or []]
    store = env_map(container)["MLFLOW_BACKEND_STORE_URI"]["value"]
    m = DB_URL.fullmatch(store)
    assert m and ENV_REF.match(m.group("password")), (
        "backend store must be a postgresql:// URL built from env vars"
    )
    for name in K8S_VAR_REF.findall(store):  # the kubelet expands only variables defined earlier in the list
        assert env_names.index(name) < env_names.index("MLFLOW_BACKEND_STORE_URI"), name
    assert m.group("host") == "postgres" and m.group("db") in init_script_databases()
    destination = option("--artifacts-destination")
    env = env_map(container)
    if K8S_VAR_REF.fullmatch(destination):
        destination = env[K8S_VAR_REF.fullmatch(destination).group(1)]["value"]
    if not destination.startswith("s3://"):
        mounts = [vm["mountPath"] for vm in container.get("volumeMounts") or []]
        assert destination in mounts, "artifacts-destination must be on a mounted PVC (or an s3:// URL)"


# ----------------------------------------------------------------------------- kustomization / README


def test_kustomization_lists_the_resources_but_not_the_example_secret() -> None:
    kustomization = load_docs(K8S / "kustomization.yaml")[0]
    resources = kustomization["resources"]
    assert EXAMPLE_SECRET not in resources
    for resource in resources:
        assert (K8S / resource).is_file(), f"kustomization lists missing {resource}"
    expected = {p.name for p in manifest_paths()} - NOT_IN_KUSTOMIZATION
    assert set(resources) == expected


def test_readme_covers_setup_and_access() -> None:
    text = README.read_text(encoding="utf-8")
    for needle in (
        "helm install kuberay-operator",
        "Redis",
        "kubectl create secret generic",
        "--from-literal",
        "kubectl -n mooring port-forward svc/mlflow 5000:5000",
        "port-forward svc/mooring-head-svc 8265:8265",
        "mooring submit --address http://localhost:8265 -- sweep configs/sweeps/fedfa_digits.yaml",
        "k8s/rayjob.yaml",
    ):
        assert needle in text, f"k8s/README.md does not mention {needle!r}"
    for cmd in re.findall(r"^\s*mooring (\w+)", text, re.M):
        assert cmd in cli_subcommands(), f"README uses unknown subcommand `mooring {cmd}`"


# ----------------------------------------------------------------------------- Dockerfile


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_base_user_install_and_command() -> None:
    instructions = dockerfile_instructions()
    froms = [rest for kw, rest in instructions if kw == "FROM"]
    assert froms and froms[-1].split()[0] == "python:3.11-slim"
    users = [rest for kw, rest in instructions if kw == "USER"]
    assert users, "Dockerfile never switches away from root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user == "1000" or re.search(
        rf"useradd\b.*--uid 1000\b.*\b{re.escape(user)}\b", DOCKERFILE.read_text(encoding="utf-8")
    )
    runs = " ".join(rest for kw, rest in instructions if kw == "RUN")
    assert re.search(r"pip install [^&;]*[\"']?\.\[cluster\][\"']?", runs), (
        "Dockerfile must `pip install .[cluster]`"
    )
    workdirs = [rest for kw, rest in instructions if kw == "WORKDIR"]
    assert workdirs and workdirs[-1] == "/app"
    cmds = [rest for kw, rest in instructions if kw == "CMD"]
    assert cmds and yaml.safe_load(cmds[-1]) == ["mooring", "--help"]


def test_dockerignore_excludes_local_state_but_keeps_packages() -> None:
    entries = {line.strip().strip("/") for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()}
    entries.discard("")
    assert {".venv", "mlruns", "runs", "data", ".git"} <= entries
    # tasks/data is a Python package: a recursive pattern would drop it from the image.
    assert (
        not {"**/data", "*/data", "tasks", "configs", "orchestrator", "README.md", "pyproject.toml"} & entries
    )
