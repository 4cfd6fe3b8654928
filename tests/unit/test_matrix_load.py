from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.matrix_text import VALID
from torchyard.errors import ConfigError
from torchyard.matrix import Tolerance, VendorPin, load_plan, parse_plan


def parse(text: str):  # type: ignore[no-untyped-def]
    return parse_plan(text, Path("matrix.toml"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_valid_matrix_becomes_a_typed_plan() -> None:
    plan = parse(VALID)
    cpu, cuda = plan.entries
    assert cpu.name == "cpu" and cpu.python == "3.11"
    assert cpu.suites == ("export", "compile", "runtime", "parity", "train")
    assert cpu.exclude_newer == "2026-11-01T00:00:00Z"
    assert [index.name for index in cuda.indexes] == ["pypi", "extra"]
    assert cuda.accelerator.index_strategy == "unsafe-best-match"
    assert cuda.accelerator.vendor == (VendorPin("torch", "2.9.1"),)
    assert cuda.accelerator.docker_run == ("--shm-size", "8g")
    assert cuda.exclude_newer == "2026-10-01T00:00:00Z"
    assert cuda.suites == ("export", "parity")
    assert cpu.precision == "fp32"
    assert cuda.tolerances == (Tolerance("float32.inductor", 1e-4, None, 0.9999),)
    assert str(cpu.accelerator.base_image).startswith("debian:bookworm-slim@sha256:7802")


def test_the_aot_suite_and_its_backends_bounds_are_opt_in() -> None:
    """An entry without `suites` runs every suite but AOTInductor's; one that lists `aot` runs it, and its
    backend's tolerance key is a known one."""
    text = VALID.replace('suites = ["export", "parity"]', 'suites = ["export", "aot"]').replace(
        '"float32.inductor"', '"float32.aotinductor"'
    )
    cpu, cuda = parse(text).entries
    assert "aot" not in cpu.suites
    assert cuda.suites == ("export", "aot")
    assert cuda.tolerances == (Tolerance("float32.aotinductor", 1e-4, None, 0.9999),)


def test_the_localization_time_bound_is_a_duration_or_off() -> None:
    def seconds(line: str) -> int:
        text = VALID.replace('suites = ["export", "parity"]', f'suites = ["export", "parity"]\n{line}')
        (cuda,) = [entry for entry in parse(text).entries if entry.name == "cuda"]
        return int(cuda.options.localize_seconds)

    assert [entry.options.localize_seconds for entry in parse(VALID).entries] == [60, 60]
    assert (seconds('localize-timeout = "5m"'), seconds("localize-timeout = false")) == (300, 0)
    bad = VALID.replace('suites = ["export", "parity"]', 'suites = ["export", "parity"]\nlocalize-timeout = true')
    assert error_of(bad) == (
        'matrix.toml: entry "cuda" > localize-timeout: expected a duration such as "60s" or "5m", or false, got true'
    )


def test_the_ops_suites_keys_are_read_only_where_it_runs() -> None:
    ops = VALID.replace(
        'suites = ["export", "parity"]',
        'suites = ["parity", "ops"]\nops-operators = "add,nn.functional.gelu"\nops-samples = 3',
    )
    (cuda,) = [entry for entry in parse(ops).entries if entry.name == "cuda"]
    assert (cuda.options.ops_operators, cuda.options.ops_samples) == ("add,nn.functional.gelu", 3)
    assert [(entry.options.ops_operators, entry.options.ops_samples) for entry in parse(VALID).entries] == [
        ("quick", 2)
    ] * 2
    without = VALID.replace('suites = ["export", "parity"]', 'suites = ["export", "parity"]\nops-samples = 3')
    assert error_of(without) == (
        'matrix.toml: entry "cuda" > ops-samples: only for an entry that runs the ops suite: add "ops" to its suites'
    )


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("tests-markers = 5", "tests-markers: expected a non-empty string, got 5"),
        ('tests-markers = "not slow"', "tests-markers: selects among the entry's own `tests`, and it has none"),
        ('suites = ["ops"]\nops-operators = 5', "ops-operators: expected a non-empty string, got 5"),
        ('suites = ["ops"]\nops-operators = "gelu tanh"', 'ops-operators: expected "quick", "all" or op_db names'),
        ('suites = ["ops"]\nops-samples = 0', "ops-samples: expected a number of samples (1 or more), got 0"),
        ("compile-modes = []", "compile-modes: expected at least one item, got an empty array"),
        ('compile-modes = ["turbo"]', "compile-modes[0]: expected one of default, "),
        ('builtin-cases = "no"', "builtin-cases: expected true or false"),
    ],
)
def test_an_entry_option_is_refused_as_its_own_reader_refused_it(line: str, error: str) -> None:
    """Issue 59: the entry's options are read by one loop over `contract.RunOptions`; each refusal, and which
    check comes first (its type, then what it needs), is as the key's own reader said it."""
    text = VALID.replace(
        'suites = ["export", "parity"]', line if "suites" in line else f'suites = ["export", "parity"]\n{line}'
    )
    assert error_of(text).startswith(f'matrix.toml: entry "cuda" > {error}'), error_of(text)


def test_committed_matrix_is_valid() -> None:
    plan = load_plan(Path(__file__).parents[2] / "matrix.toml")
    assert [entry.name for entry in plan.entries] == ["cpu", "cpu-bf16", "cuda", "rocm", "xpu", "mps"]
    bf16 = plan.entry("cpu-bf16")
    assert (bf16.precision, bf16.suites) == ("bf16", ("train",))
    assert bf16.requirements == plan.entry("cpu").requirements  # the cpu entry's stack, at bf16
    mps = plan.entry("mps").accelerator
    assert (mps.native, mps.base_image, mps.platform, mps.deployment_target) == (
        True,
        None,
        "aarch64-apple-darwin",
        "14.0",
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'python = "3.12"',
            "python = 3.12",
            'matrix.toml: entry "cuda" > python: expected "3.N", got 3.12',
        ),
        (
            'python = "3.12"',
            'python = "3.x"',
            'matrix.toml: entry "cuda" > python: expected "3.N", got "3.x"',
        ),
        (
            'requirements = ["torch==2.14.*"]',
            "requirements = []",
            'matrix.toml: entry "cuda" > requirements: expected at least one item, got an empty array',
        ),
        (
            'requirements = ["torch==2.14.*"]',
            'requirements = ["torch", 3]',
            'matrix.toml: entry "cuda" > requirements[1]: expected a non-empty string, got 3',
        ),
        (
            'accelerator = "cuda"',
            'accelerator = "rocm"',
            'matrix.toml: entry "cuda" > accelerator: unknown accelerator "rocm" '
            "(defined in [accelerators]: cpu, cuda)",
        ),
        (
            'indexes = ["pypi", "extra"]',
            'indexes = ["pypi", "nvidia"]',
            'matrix.toml: accelerators > cuda > indexes[1]: unknown index "nvidia" (defined in [indexes]: pypi, extra)',
        ),
        (
            'base-image = "ubuntu:24.04@sha256:1e622c5f073b4f6bfad6632f2616c7f59ef256e96fe78bf6a595d1dc4376ac02"',
            'base-image = "ubuntu:24.04"',
            "matrix.toml: accelerators > cuda > base-image: expected an image pinned by digest "
            '(name:tag@sha256:...), got "ubuntu:24.04"',
        ),
        (
            'base-image = "ubuntu:24.04@sha256:1e622c5f073b4f6bfad6632f2616c7f59ef256e96fe78bf6a595d1dc4376ac02"',
            'base-image = "ubuntu:24.04@sha256:1e62"',
            "matrix.toml: accelerators > cuda > base-image: expected name:tag@sha256:<64 hex digits>, "
            'got "ubuntu:24.04@sha256:1e62"',
        ),
        (
            'suites = ["export", "parity"]',
            'suits = ["export", "parity"]',
            "matrix.toml: entry \"cuda\" > suits: unknown key; did you mean 'suites'?",
        ),
        (
            'suites = ["export", "parity"]',
            'suites = ["export", "benchmarks"]',
            'matrix.toml: entry "cuda" > suites[1]: expected one of export, compile, runtime, parity, train, aot, ops, '
            'got "benchmarks"',
        ),
        (
            'index-strategy = "unsafe-best-match"',
            'index-strategy = "best"',
            "matrix.toml: accelerators > cuda > index-strategy: expected one of first-index, "
            'unsafe-first-match, unsafe-best-match, got "best"',
        ),
        (
            "[accelerators.cuda]",
            "[accelerators.tpu]",
            'matrix.toml: accelerators > tpu: expected one of cpu, cuda, rocm, xpu, mps, got "tpu"',
        ),
        (
            'runs-on = ["self-hosted", "gpu", "cuda"]',
            'runs_on = ["self-hosted", "gpu", "cuda"]',
            "matrix.toml: accelerators > cuda > runs-on: required key is missing (is 'runs_on' a typo for it?)",
        ),
        (
            "max-scaled-error = 1e-4",
            'max-scaled-error = "small"',
            'matrix.toml: entry "cuda" > tolerances > float32.inductor > max-scaled-error: '
            'expected a number, got "small"',
        ),
        (
            "exclude-newer = 2026-10-01\n",
            'exclude-newer = "yesterday"\n',
            'matrix.toml: entry "cuda" > exclude-newer: expected a date (2026-11-01) or a UTC date-time '
            '(2026-11-01T00:00:00Z), got "yesterday"',
        ),
        (
            'suites = ["export", "parity"]',
            'suites = ["export", "parity"]\nprecision = "int8"',
            'matrix.toml: entry "cuda" > precision: expected one of fp32, bf16, fp16, got "int8"',
        ),
        (
            'torch = "2.9.1"',
            "torch = 2",
            "matrix.toml: accelerators > cuda > vendor > torch: expected a non-empty string, got 2",
        ),
    ],
)
def test_each_mistake_gets_one_pointed_line(old: str, new: str, expected: str) -> None:
    assert old in VALID
    assert error_of(VALID.replace(old, new, 1)) == expected


def test_duplicate_entry_names() -> None:
    text = VALID.replace('name = "cuda"', 'name = "cpu"')
    assert error_of(text) == 'matrix.toml: entry "cpu" > name: duplicate entry name "cpu"'


def test_a_matrix_toml_that_is_a_link_is_never_read(tmp_path: Path) -> None:
    """A pull request can commit matrix.toml as a link to a host file: its parse errors would echo it."""
    secret = tmp_path / "secret.toml"
    secret.write_text("token = 'hostile-secret'\n")
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "matrix.toml").symlink_to(secret)
    with pytest.raises(ConfigError, match="is a symbolic link") as caught:
        load_plan(tmp_path / "checkout" / "matrix.toml")
    assert "hostile-secret" not in str(caught.value)


def test_an_entry_cannot_take_the_dependency_images_name() -> None:
    text = VALID.replace('name = "cuda"', 'name = "dependencies"')
    assert error_of(text) == (
        'matrix.toml: entry "dependencies" > name: "dependencies" is torchyard\'s own image name: choose another'
    )


@pytest.mark.parametrize("name", ["cpu-local", "cuda-in-place", "cpu-m1a2b3c4d"])
def test_an_entry_cannot_take_a_name_torchyard_gives_another_entrys_runs(name: str) -> None:
    """A helper's route (issue 70): `cpu-local` shared `cpu --local`'s reports and kept baseline, and
    `cpu-m<8 hex>` examples/zoo's `cpu`'s cache volume and baseline, so each run was compared with the other's."""
    said = error_of(VALID.replace('name = "cuda"', f'name = "{name}"'))
    assert "ends as torchyard names another entry's runs" in said
    assert parse(VALID.replace('name = "cuda"', 'name = "cpu-local-gpu"')).entries[1].name == "cpu-local-gpu"


def test_missing_required_key_in_entry() -> None:
    text = VALID.replace('python = "3.11"\n', "")
    assert error_of(text) == 'matrix.toml: entry "cpu" > python: required key is missing'


def test_entry_without_name_is_named_by_position() -> None:
    text = VALID.replace('name = "cuda"\n', "")
    assert error_of(text) == "matrix.toml: entry[1] > name: required key is missing"


def test_unknown_top_level_key_suggests_the_known_one() -> None:
    text = VALID.replace("[indexes]", "[indices]")
    assert error_of(text) == "matrix.toml: indexes: required key is missing (is 'indices' a typo for it?)"
    text = VALID + '\n[acelerators.xpu]\nbase-image = "x"\n'
    assert error_of(text) == "matrix.toml: acelerators: unknown key; did you mean 'accelerators'?"


def test_toml_syntax_error_names_the_line() -> None:
    message = error_of(VALID.replace('python = "3.11"', 'python = "3.11'))
    assert message.startswith("matrix.toml: invalid TOML: ")
    assert "line 25" in message


def test_exclude_newer_required_without_a_top_level_default() -> None:
    text = VALID.replace("exclude-newer = 2026-11-01T00:00:00Z\n", "")
    assert error_of(text) == (
        'matrix.toml: entry "cpu" > exclude-newer: required key is missing (or set exclude-newer at the top level)'
    )


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such file \(pass --matrix PATH\)"):
        load_plan(tmp_path / "matrix.toml")


def test_control_characters_in_keys_and_values_stay_on_one_line() -> None:
    text = VALID.replace('python = "3.12"', 'python = "3.12\\n"')
    assert error_of(text) == 'matrix.toml: entry "cuda" > python: expected "3.N", got "3.12\\n"'
    text = VALID.replace("[indexes]", '[indexes]\n"bad\\nkey" = 1')
    assert error_of(text) == "matrix.toml: indexes > bad\\nkey: expected a non-empty string, got 1"


VALUE_MISTAKES = [
    (
        '[entry.tolerances."float32.inductor"]',
        '[entry.tolerances."float23.inductor"]',
        'matrix.toml: entry "cuda" > tolerances > float23.inductor: unknown dtype "float23"; did you mean \'float32\'?',
    ),
    (
        '[entry.tolerances."float32.inductor"]',
        '[entry.tolerances."float32.indcutor"]',
        'matrix.toml: entry "cuda" > tolerances > float32.indcutor: unknown backend "indcutor"; did you mean '
        "'inductor'?",
    ),
    (
        "max-scaled-error = 1e-4",
        "max-scaled-error = -1e-4",
        'matrix.toml: entry "cuda" > tolerances > float32.inductor > max-scaled-error: an error bound cannot be '
        "negative, got -0.0001",
    ),
    (
        "min-cosine = 0.9999",
        "min-cosine = 1.5",
        'matrix.toml: entry "cuda" > tolerances > float32.inductor > min-cosine: a cosine lies in [-1, 1], got 1.5',
    ),
    (
        "min-cosine = 0.9999",
        "min-cosine = inf",
        'matrix.toml: entry "cuda" > tolerances > float32.inductor > min-cosine: expected a finite number, got inf',
    ),
    (
        'requirements = ["torch==2.14.*", "pytest"]',
        'requirements = ["torch==2.14.*", "pytest >>= 8"]',
        'matrix.toml: entry "cpu" > requirements[1]: not a PEP 508 requirement: "pytest >>= 8" (',  # packaging's words
    ),
    (
        'torch = "2.9.1"',
        'torch = "two point nine"',
        'matrix.toml: accelerators > cuda > vendor > torch: expected a PEP 440 version or "*", got "two point nine"',
    ),
    (
        'python = "3.11"',
        'python = "3.7"',
        'matrix.toml: entry "cpu" > python: Python 3.7 is not one torchyard supports (3.10, 3.11, 3.12, 3.13, 3.14)',
    ),
    (
        'requirements = ["torch==2.14.*", "pytest"]',
        'requirements = ["torch==2.14.*", "pytest"]\nprecision = "fp16"',
        'matrix.toml: entry "cpu" > precision: fp16 on the CPU is refused: CPU kernels would silently compute in '
        "full precision; use bf16",
    ),
    (
        'docker-run = ["--shm-size", "8g"]',
        'docker-run = ["--shm-size", "8g", "--privileged"]',
        'matrix.toml: accelerators > cuda > docker-run[2]: "--privileged" can give up the container\'s isolation; '
        'a machine that accepts that allows it in its own machine.toml ([allow] docker-run = ["--privileged"]), '
        "never in matrix.toml",
    ),
    (
        'docker-run = ["--shm-size", "8g"]',
        'docker-run = ["--network=host"]',
        'matrix.toml: accelerators > cuda > docker-run[0]: "--network=host" can give up the container\'s '
        "isolation; a machine that accepts that allows it in its own machine.toml ([allow] docker-run = "
        '["--network"]), never in matrix.toml',
    ),
    (
        'docker-run = ["--shm-size", "8g"]',
        'docker-run = ["--env", "TORCHYARD_TRUST=trusted"]',
        'matrix.toml: accelerators > cuda > docker-run[0]: --env "TORCHYARD_TRUST=trusted": TORCHYARD_* variables are '
        "torchyard's own (the run's trust among them), set by the host alone",
    ),
    (
        'docker-run = ["--shm-size", "8g"]',
        'docker-run = ["-e=torchyard_report_dir=/tmp"]',
        'matrix.toml: accelerators > cuda > docker-run[0]: -e "torchyard_report_dir=/tmp": TORCHYARD_* variables '
        "are torchyard's own (the run's trust among them), set by the host alone",
    ),
    (
        'docker-run = ["--shm-size", "8g"]',
        'docker-run = ["-v", "/:/host"]',
        'matrix.toml: accelerators > cuda > docker-run[0]: "-v" can give up the container\'s isolation; a machine '
        'that accepts that allows it in its own machine.toml ([allow] docker-run = ["-v"]), never in matrix.toml',
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), VALUE_MISTAKES)
def test_values_are_checked_not_only_types(old: str, new: str, expected: str) -> None:
    assert old in VALID
    message = error_of(VALID.replace(old, new, 1))
    assert message == expected or (expected.endswith("(") and message.startswith(expected))


def test_a_machine_may_allow_a_flag_that_matrix_toml_cannot() -> None:
    text = VALID.replace('docker-run = ["--shm-size", "8g"]', 'docker-run = ["--privileged"]')
    plan = parse_plan(text, Path("matrix.toml"), allowed_docker_run={"--privileged"})
    assert plan.entry("cuda").accelerator.docker_run == ("--privileged",)


@pytest.mark.parametrize(
    "flags",
    ['["--user", "0:0"]', '["-u=1000"]', '["--entrypoint", "/bin/sh"]', '["--health-cmd", "python -c 1"]'],
)
def test_what_the_warden_sets_no_matrix_sets_whatever_the_machine_allows(flags: str) -> None:
    """The warden (PID 1, root with four capabilities) starts the tests as the run's user: a `--user`
    after torchyard's would leave it the tests' to starve, an entry point would replace it, a health check runs
    as root beside it."""
    text = VALID.replace('docker-run = ["--shm-size", "8g"]', f"docker-run = {flags}")
    flag = flags.split('"')[1].split("=", maxsplit=1)[0]
    with pytest.raises(ConfigError, match=r"are the image's warden's to set, never matrix\.toml's"):
        parse_plan(text, Path("matrix.toml"), allowed_docker_run={flag})


@pytest.mark.parametrize(
    "data",
    [b"exclude-newer = " + b"[" * 5000 + b"]" * 5000 + b"\n", b"\xff\xfe not utf-8 \x80\n"],
    ids=["deep-nesting", "bad-encoding"],
)
def test_malformed_files_are_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "matrix.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_plan(path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(("matrix.toml: invalid TOML", str(path)))


def test_a_folder_where_matrix_toml_belongs_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").mkdir()
    with pytest.raises(ConfigError, match=r"matrix.toml: not a regular file"):
        load_plan(tmp_path / "matrix.toml")


def test_a_native_accelerator_has_no_base_image() -> None:
    native = VALID + '[accelerators.mps]\nindexes = ["pypi"]\nruns-on = ["self-hosted", "macOS"]\n'
    assert parse(native).accelerators[-1].base_image is None
    with_base = native.replace("[accelerators.mps]\n", '[accelerators.mps]\nbase-image = "x@sha256:' + "0" * 64 + '"\n')
    assert error_of(with_base) == (
        "matrix.toml: accelerators > mps > base-image: mps runs natively (no container reaches its device): remove it"
    )
    bad_target = native.replace(
        'indexes = ["pypi"]\nruns-on = ["self-hosted", "macOS"]',
        'indexes = ["pypi"]\nruns-on = ["m"]\ndeployment-target = "fourteen"',
    )
    assert error_of(bad_target) == (
        'matrix.toml: accelerators > mps > deployment-target: expected a macOS version such as "14.0", got "fourteen"'
    )


def test_compile_modes_become_backend_columns_in_the_run_environment() -> None:
    from torchyard.run.environment import entry_environment

    text = VALID.replace(
        'requirements = ["torch==2.14.*", "pytest"]',
        'requirements = ["torch==2.14.*", "pytest"]\ncompile-modes = ["default", "max-autotune-no-cudagraphs"]',
    )
    entry = parse(text).entry("cpu")
    assert entry.options.compile_modes == ("default", "max-autotune-no-cudagraphs")
    assert entry_environment(entry, "/reports")["TORCHYARD_COMPILE_MODES"] == "default,max-autotune-no-cudagraphs"
    assert error_of(text.replace('"max-autotune-no-cudagraphs"', '"fastest"')) == (
        'matrix.toml: entry "cpu" > compile-modes[1]: expected one of default, reduce-overhead, max-autotune, '
        'max-autotune-no-cudagraphs, got "fastest"'
    )


def test_system_packages_are_debian_names_with_alternatives() -> None:
    text = VALID.replace(
        "[accelerators.cpu]\n", '[accelerators.cpu]\nsystem-packages = ["libze1", "libfoo|libbar-2"]\n', 1
    )
    assert parse(text).accelerators[0].system_packages == ("libze1", "libfoo|libbar-2")
    assert error_of(text.replace('"libfoo|libbar-2"', '"libze1; rm -rf /"')) == (
        "matrix.toml: accelerators > cpu > system-packages[1]: expected a Debian package name, or alternatives "
        'as "a|b", got "libze1; rm -rf /"'
    )
    native = VALID + '[accelerators.mps]\nindexes = ["pypi"]\nruns-on = ["m"]\nsystem-packages = ["x"]\n'
    assert error_of(native) == (
        "matrix.toml: accelerators > mps > system-packages: mps runs natively (no image to install into): remove it"
    )


def test_the_shipped_xpu_entry_takes_torch_from_the_xpu_index_alone() -> None:
    """first-index with the XPU index first: uv takes a package the XPU index has from it alone, so a newer
    PyPI torch (a CUDA build) cannot win; the image gets Level Zero from apt."""
    xpu = load_plan(Path(__file__).parents[2] / "matrix.toml").entry("xpu").accelerator
    assert xpu.index_strategy == "first-index" and xpu.indexes[0].url == "https://download.pytorch.org/whl/xpu"
    assert {"libze1", "libze-dev"} <= set(xpu.system_packages)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ('["--env", "TORCHYARD_REGISTRY_PASSWORD"]', '--env "TORCHYARD_REGISTRY_PASSWORD" copies the host\'s value'),
        ('["-e=HOME"]', '-e "HOME" copies the host\'s value'),
        ('["--env-file", "/root/.env"]', '"--env-file" can give up the container\'s isolation'),
        ('["--tmpfs", "/tmp:size=100g"]', '"--tmpfs" can give up the container\'s isolation'),
        ('["--ulimit", "nofile=1048576"]', '"--ulimit" can give up'),
        ('["--oom-score-adj", "-1000"]', "a negative --oom-score-adj (-1000) shields the container"),
        # a stop that waits for the container forever (the warden passes SIGTERM to its child alone)
        ('["--stop-timeout", "-1"]', '--stop-timeout "-1": a stop waits at most 60 s'),
        ('["--stop-timeout=86400"]', "a stop waits at most 60 s"),
        ('["--label", "dev.torchyard.trust=trusted"]', "labels under dev.torchyard. are torchyard's own"),
        # a word that is no flag's value: docker run would run it as the image, torchyard's own as its arguments
        ('["--cpus", "1", "attacker/img:1"]', '"attacker/img:1" is neither a flag nor a flag\'s value'),
        ('["--cpus=1", "torchyard/cpu:latest"]', '"torchyard/cpu:latest" is neither a flag nor'),
        ('["--init", "attacker/img"]', '"attacker/img" is neither a flag nor'),
        ('["attacker/img"]', '"attacker/img" is neither a flag nor'),
        # read as docker's parser reads it: a flag's value may start with "-" (the label's value here is
        # "--cpus"), so the next word is no flag's and docker would run it as the image
        ('["--label", "--cpus", "evil.example/x:1", "--shm-size", "64m"]', '"evil.example/x:1" is neither a flag nor'),
        ('["--label", "-e", "evil.example/x:1"]', '"evil.example/x:1" is neither a flag nor'),
        # a flag that takes a value, last: docker would take torchyard's own next flag for its value
        ('["--shm-size", "8g", "--label"]', '"--label" takes a value and has none'),
        ('["--cpus"]', '"--cpus" takes a value and has none'),
        # what a device runtime reads: NVIDIA's hands the container every GPU it names
        ('["--env", "NVIDIA_VISIBLE_DEVICES=all"]', "a device runtime reads it to hand the container GPUs"),
        ('["--env=NVIDIA_DRIVER_CAPABILITIES=all"]', "a device runtime reads it"),
        ('["-e", "nvidia_visible_devices=0"]', "a device runtime reads it"),
        ('["--env", "AMD_VISIBLE_DEVICES=all"]', "a device runtime reads it"),
        # what the dynamic loader reads in every process, the warden that holds the deadline first (issue 70: a
        # preloaded library would run in it before it made itself untraceable)
        ('["--env", "LD_PRELOAD=/workspace/x.so"]', "the dynamic loader reads it in every process"),
        ('["-e", "ld_library_path=/workspace"]', "the dynamic loader reads it"),
        ('["--env=LD_AUDIT=/workspace/a.so"]', "the dynamic loader reads it"),
        ('["--env", "GLIBC_TUNABLES=glibc.malloc.check=3"]', "the dynamic loader reads it"),
        ('["--env", "GCONV_PATH=/workspace"]', "the dynamic loader reads it"),
        # a quota below one CPU starves the container's warden too: a run ended minutes past its deadline
        ('["--cpus", "0.01"]', "below one CPU the container's quota starves the warden"),
        ('["--cpus=0.5"]', "below one CPU"),
        ('["--cpus", "nan"]', "below one CPU"),
    ],
)
def test_matrix_docker_run_can_only_tighten_the_seal(flags: str, message: str) -> None:
    text = VALID.replace('docker-run = ["--shm-size", "8g"]', f"docker-run = {flags}")
    assert error_of(text).startswith("matrix.toml: accelerators > cuda > docker-run[")
    assert message in error_of(text)
    assert parse(VALID.replace('docker-run = ["--shm-size", "8g"]', 'docker-run = ["--env", "MODE=ci"]'))


def test_an_entry_timeout_is_a_duration() -> None:
    text = VALID.replace(
        'requirements = ["torch==2.14.*", "pytest"]', 'requirements = ["torch", "pytest"]\ntimeout = "90m"'
    )
    assert parse(text).entry("cpu").timeout == "90m"
    assert parse(VALID).entry("cpu").timeout == "2h"
    assert error_of(text.replace('"90m"', '"forever"')) == (
        'matrix.toml: entry "cpu" > timeout: expected a duration such as "2h", "90m" or "600s", got "forever"'
    )


def test_an_entry_may_build_on_a_base_of_its_own() -> None:
    own = "docker.io/library/python:3.13-slim@sha256:" + "2" * 64
    text = VALID.replace(
        'name = "cpu"\naccelerator = "cpu"\npython = "3.11"\n',
        f'name = "cpu"\naccelerator = "cpu"\npython = "3.13"\nbase-image = "{own}"\n',
    )
    plan = parse(text)
    assert str(plan.entry("cpu").accelerator.base_image) == own
    assert str(plan.accelerators[0].base_image) == str(parse(VALID).entry("cpu").accelerator.base_image)  # untouched
    assert error_of(text.replace(own, "python:3.13-slim")).startswith('matrix.toml: entry "cpu" > base-image: ')
    native = VALID + '[accelerators.mps]\nindexes = ["pypi"]\nruns-on = ["m"]\n'
    native += '[[entry]]\nname = "mac"\naccelerator = "mps"\npython = "3.12"\nrequirements = ["torch"]\n'
    native += f'base-image = "{own}"\n'
    assert error_of(native) == (
        'matrix.toml: entry "mac" > base-image: mps runs natively (no container reaches its device): remove it'
    )


def test_an_entry_can_keep_a_dependency_it_does_not_need_out_of_its_lock(tmp_path: Path) -> None:
    """Issue 58: 1 GB of triton came into a CPU entry's image with torch from PyPI, and nothing said how to
    leave it out. `exclude` hands the names to uv's `--excludes`, recorded in the lock's inputs."""
    from torchyard.lock.inputs import LockInputs
    from torchyard.lock.resolve import _stage

    text = VALID.replace('name = "cuda"', 'name = "cuda"\nexclude = ["triton", "nvidia-nccl-cu13"]', 1)
    entry = parse(text).entry("cuda")
    assert entry.exclude == ("triton", "nvidia-nccl-cu13")
    inputs = LockInputs.of(entry, "0.13.9")
    assert inputs.record()["exclude"] == ["triton", "nvidia-nccl-cu13"]
    excludes = _stage(inputs, tmp_path)
    assert excludes is not None and excludes.read_text().splitlines()[-2:] == ["triton", "nvidia-nccl-cu13"]
    for bad, message in (('["Torch"]', '"Torch" is the stack itself'), ('["tri ton"]', '"tri ton" is not a package')):
        assert message in error_of(text.replace('exclude = ["triton", "nvidia-nccl-cu13"]', f"exclude = {bad}"))
