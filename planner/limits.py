"""Every input cap and shared default of the package, in one place.

A value beyond a cap is refused where it enters (a planning request, a fleet file, a GPU
catalog, the workbench's boxes) with an error naming the field; the caps are far beyond
any real value, and small enough that the planner's sums stay exact and its time and
memory targets hold (``make bench``). This module imports nothing, so anything may use it.
"""

from __future__ import annotations

MAX_BYTES = 2**53
"""A number of bytes (a model's weights, a KV size, a headroom): beyond 8 PiB it is
almost surely a unit mistake."""

MAX_NODE_BYTES = 2**50
"""A node's VRAM, detected or capped: up to 1 PiB, hundreds of times today's largest.
The search sums the usable bytes of up to :data:`MAX_LAYERS` stages, and
4,096 x 2**50 = 2**62 keeps every such sum exact in 64-bit integers (model sizes, up to
:data:`MAX_BYTES` per layer, are summed in Python integers)."""

MAX_SHOWN_BYTES = 2**70
"""The largest number of bytes the formatters show (``format_bytes``): past every sum
the package makes (:data:`MAX_LAYERS` layers of :data:`MAX_BYTES` each is 2**65)."""

MAX_LISTED_NODE_IDS = 32
"""Entries a table, CSV cell, chart or report lists of one candidate's node set: a set of
more ids is written as runs of numbered ids (``gpu-0000..gpu-4095``), and what is past
this many runs is counted (``(+1,200 more)``). The Python API keeps every id."""

MAX_LAYERS = 4096
"""Transformer layers of a model."""

MAX_LAYER_NODES = 1000
"""ggml operations one layer of a model's graph computes (the most of any counted
architecture is about 120)."""

MAX_CONTEXT = 2**31
"""Tokens of a context length (native, override or target)."""

MAX_LATENCY_MS = 10**9
"""A latency or time target in milliseconds."""

MAX_MINIMUM_NODES = 100_000
"""The ``minimum_nodes`` a plan may ask for."""

MAX_FAILURES_TOLERATED = 16
"""Nodes a fleet may be asked to survive losing (each loss multiplies the fleets sizing
checks)."""

MAX_TOP_FLEETS = 1000
"""Fleets one sizing answer may list (``top``)."""

MAX_SEED = 2**63 - 1
"""A random seed (what a 64-bit integer holds)."""

MAX_NUMBER_DIGITS = 24
"""Digits of a number written as text, before or after its decimal point (a size, a
latency): far beyond any real value, and refused before it is read."""

MAX_LANES = 4096
"""Parallel lanes (sequences decoded at once)."""

MAX_NODES = 10_000
"""Nodes of one fleet, after a fleet file's ``count`` expansion; also the largest
``count`` of one entry and of one GPU kind. The search is held to its time and memory
targets up to here (``make bench``)."""

MAX_SIMULATED_CHANGES = 200_000
"""Failures and repairs one simulated horizon may hold (``planner.simulation``): about
5 s of re-planning a small fleet; drawn one by one and refused as soon as passed."""

MAX_FENCE_TERMS = 5_000
"""Re-plans one simulated horizon may run through the fence simulator, each a claim
exchange of about 3 ms and 25 KB."""

MAX_SIMULATION_RUNS = 10_000
"""Horizons one ``simulate_many`` call runs."""

MAX_SWEEP_SCENARIOS = 1_000_000
"""Scenarios of one sweep grid, counted from the axes before any row is built. The grid's
rows are evaluated as they stream, so a sweep of this many starts at once; its results
take a few hundred MB."""

MAX_SWEEP_WORKERS = 64
"""Local worker processes (or LocalCluster workers) one sweep starts."""

MAX_SWEEP_BATCH = 10_000
"""Scenarios sent to a worker at once."""

MAX_GRID_TEXT = 4096
"""Characters of one text value of a sweep grid (a path, a model id, a list of kinds)."""

MAX_GGUF_KEYS = 65_536
"""Metadata keys of one GGUF file (real models have a few dozen)."""

MAX_GGUF_KEY_BYTES = 65_536
"""Bytes of one GGUF metadata key's name (real ones are under 100)."""

MAX_GGUF_TENSORS = 262_144
"""Tensors of one GGUF file (real models have a few thousand: 4,096 layers of 64)."""

GGUF_BUILD_BUDGET_BYTES = 4 * 2**20
"""Bytes of GGUF metadata values the reader builds beyond scalars and short strings
(each array item counted at 64 bytes more); longer values are stepped over. With the
caps above, reading a header stays within a few hundred MB whatever the file holds."""
MAX_BANDWIDTH_BYTES_PER_S = 2**53
"""A memory or link bandwidth in bytes per second (a GPU's ``memory_bandwidth_bytes_per_s``,
the ``link_bandwidth_bytes_per_s`` between stages): 9 PB/s, far above any device, and
exact as a float."""

MAX_TFLOPS = 1_000_000
"""A GPU kind's FP16 throughput in TFLOPS (``fp16_tflops``)."""

DEFAULT_CACHE_TYPE = "f16"
"""The KV cache type when none is chosen (llama.cpp's ``-ctk``/``-ctv`` default)."""

DEFAULT_BATCH = 2048
"""llama.cpp's logical batch in tokens when none is chosen (``-b``, ``--batch-size``): a
prompt is decoded in batches of this many tokens, each split into micro-batches."""

DEFAULT_UBATCH = 512
"""llama.cpp's micro-batch in tokens when none is chosen (``-ub``, ``--ubatch-size``)."""

DEFAULT_PARALLEL_LANES = 4
"""Parallel sequences llama.cpp sizes its caches for when none is chosen (llama-server's
``--parallel`` default), and the most lanes a plan tries without an override."""

MIN_PRICE_PER_HOUR = 0.0001
"""USD per hour of one GPU in a catalog: a hundredth of a cent. Sizing counts prices in
micro-dollars, so a price below this would count as nothing and prune nothing."""

MAX_PRICE_PER_HOUR = 1_000_000
"""USD per hour of one GPU in a catalog."""

DEFAULT_PRICE_KIND = "rented"
"""What a catalog price is when its entry does not say (``price_kind``), and the prices
sizing compares unless told otherwise: what a provider charges by the hour."""

MAX_AVAILABILITY_NODE_PLANS = 1_000_000
"""The work one availability answer may take, in nodes planned (each plan of a failure
state counts its surviving nodes): 100 plans of a 10,000-node fleet, within half a
minute; beyond it the answer is the interval so far, which holds the exact value."""

MAX_SIZING_KINDS = 100
"""Catalog kinds one sizing question compares: the exact search decides a count per kind,
and beyond this its bounds cost more than they save (choose kinds with ``--kinds``)."""

MAX_SIZING_PLANS = 3_000
"""Plans one sizing answer may make (the search and its Pareto pass together), about
half a minute; beyond it the question is refused as ``SizingTooLarge``."""

MAX_SIZING_QUEUE = 500_000
"""Partial fleets the sizing search may hold at once (their memory); beyond it the
question is refused as ``SizingTooLarge``."""

MAX_GGUF_FILES = 200
"""The most GGUF files the workbench's folder search lists (a big models folder is cut
there)."""

# -- the speed estimate's physical bounds (docs/speed.md, "Bounds") ---------------------
# A figure outside these is not a device or a model that exists: each is refused by name
# where it enters (a catalog, a fleet file's numbers, a command's option), so that every
# estimate stays a finite number of milliseconds, computed without overflow.

MIN_BANDWIDTH_BYTES_PER_S = 10**9
"""A GPU kind's memory bandwidth: 1 GB/s, below any memory a model is run from (one
channel of DDR memory from 2003 gives 3.2 GB/s)."""

MIN_LINK_BANDWIDTH_BYTES_PER_S = 10**5
"""The link between stages: 100 kB/s (0.8 Mb/s), below any network a split is run over."""

MIN_TFLOPS = 0.001
"""A GPU kind's FP16 throughput: 1 GFLOPS, below any chip llama.cpp runs on (one core of
a phone's CPU does tens)."""

MAX_SHADERS = 10_000_000
"""A GPU kind's shaders, or a CPU's cores: far beyond any real one (the largest today have
tens of thousands of shaders)."""

MIN_CLOCK_MHZ = 1
"""The slowest clock of a GPU or CPU kind, in MHz."""

MAX_CLOCK_MHZ = 100_000
"""The fastest clock of a GPU or CPU kind, in MHz (today's run at about 3,000 to 6,000)."""

MAX_HIDDEN_SIZE = 2**20
"""A model's hidden size (embedding width): about a million, 40 times today's widest."""

MAX_ATTENTION_WIDTH = 2**22
"""Attention heads times head size of one layer."""

MAX_ATTENTION_HEADS = 2**16
"""Attention (query or KV) heads of one layer."""

MAX_EXPERTS = 2**16
"""Routed experts of one layer (today's most: a few hundred)."""

MIN_BITS_PER_PARAMETER = 1
"""The least a model's weights hold per parameter: one bit (llama.cpp's smallest
quantisations store about 1.6)."""

MAX_BITS_PER_PARAMETER = 64
"""The most a model's weights hold per parameter: 64 bits (F64)."""

MAX_UBATCH = 2**20
"""Tokens of one llama.cpp micro-batch (``-ub``)."""

MAX_LLAMA_CPP_BUILD = 10**6
"""A llama.cpp build number (``b<N>``; 11,434 at the time of writing)."""

MAX_THREADS = 512
"""Threads of one llama.cpp CPU computation (``-t``): ggml's ``GGML_MAX_N_THREADS``."""

MAX_RPC_DEVICES = 16
"""Devices one llama.cpp rpc-server may report to ``planner discover``: one llama.cpp
process schedules at most 16 backends (``GGML_SCHED_MAX_BACKENDS`` in ggml-backend.cpp),
so a server with more could not be used whole; a reply beyond it is refused before any
device is asked for."""

DEFAULT_RPC_TIMEOUT_S = 5.0
"""Seconds ``planner discover`` gives each rpc-server to connect and answer everything."""

MAX_RPC_TIMEOUT_S = 600.0
"""The longest ``--timeout`` ``planner discover`` takes."""

MAX_LOG_BYTES = 256 * 1024 * 1024
"""Bytes of one llama.cpp log ``planner verify`` reads (a verbose llama-server log of a
day's requests is a few MB); a larger file is refused before it is read."""

MAX_BENCH_BYTES = 16 * 1024 * 1024
"""Characters of one llama-bench output ``planner calibrate`` reads (a run of hundreds of
tests is a few hundred KB)."""

MAX_BENCH_RUNS = 10_000
"""Tests (rows) of one llama-bench output."""

MAX_BENCH_GPUS = 64
"""GPUs one llama-bench output lists (its ``gpu_info``, or the log's device lines) that
``planner calibrate`` reads; more are not read (a machine has a few)."""

MAX_TOKENS_PER_S = 10**9
"""A llama-bench speed in tokens per second: far beyond any device."""
