"""The result files' CSV columns (docs/RESULTS.md): samples.csv and summary.csv of each plan
kind, and the stage columns it adds. hopbench.results re-exports them."""

from __future__ import annotations

SAMPLE_COLUMNS = ["payload", "transport", "tokens", "request_bytes", "reply_bytes", "seq", "phase", "warmup", "rtt_ns"]
SUMMARY_COLUMNS = [
    "payload", "transport", "tokens", "request_bytes", "reply_bytes", "k", "n",
    "min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "mean_ns", "std_ns",
    "p50_ci_lo_ns", "p50_ci_hi_ns", "drift_rel", "drift", "complete",
]

#: GPU plans (--memory cuda) add these: where each end's payload lives, then per-cycle
#: stage times (docs/RESULTS.md "GPU stages"); host-only runs keep the columns above
GPU_COLUMNS = ["client_memory", "server_memory", "gpu_path"]
STAGE_COLUMNS = ["d2h_ns", "transfer_ns", "h2d_ns", "server_h2d_ns", "server_d2h_ns", "wire_ns"]


#: codec plans (--codec, docs/CODECS.md) add the codec, the per-cycle encode (client) and
#: decode (server) times, the rest of the round trip, and the bytes that crossed
CODEC_COLUMNS = ["codec", "payload_source"]
CODEC_STAGE_COLUMNS = ["encode_ns", "decode_ns", "codec_wire_ns"]
CODEC_SUMMARY = ["wire_bytes_mean", "ratio", "rel_rms", "cosine_min"]


#: several targets at once and open-loop load (docs/RESULTS.md "Several targets"): the
#: target of each row, an open-loop send's intended time (ns from the plan's start) and its
#: lag behind it; per target its rate, goodput, late sends, and the tails read from its
#: HdrHistogram (merged over the targets in the aggregate row)
LOAD_SAMPLE = ["target", "intended_ns", "send_lag_ns"]
LOAD_SUMMARY = ["target", "clients", "offered_per_s", "cycles_per_s", "goodput_mbit", "late_sends", "send_lag_p50_ns",
                "send_lag_p99_ns", "hdr_p99_ns", "hdr_p999_ns"]


#: streamed plans (docs/STREAM.md): per cycle the worst chunk's send lag, the accept count's,
#: and the drafter's hold (its clock: the last chunk's arrival to the accept count's)
#: a streamed payload from a real producer (`--target`, docs/STREAM.md "A real producer"): per
#: cycle the last tap's ready time and its copy's landing on the device (ns from the forward's
#: start; 0 where a full graph hides them), the last chunk's send done and the forward's end
#: as the host saw them (ns from the cycle's start), and the forward's end on the device
PRODUCER_STAGE_COLUMNS = ["tap_ready_ns", "tap_copied_ns", "taps_sent_ns", "forward_end_ns", "forward_seen_ns"]
STREAM_STAGE_COLUMNS = ["send_lag_ns", "end_lag_ns", "server_hold_ns", *PRODUCER_STAGE_COLUMNS]


#: plans served by the server's drafter model (docs/DRAFTER.md): per cycle its forward's own
#: time, its wait for a batch, the rows of the batch it ran in, the work started before the
#: accept count (streamed, --early), the reply time without the forward, and the ledger: the
#: rows staged into the forward, the ids back, the server's whole time from the request
#: received to the reply handed to the transport, and the hop without it (the wire's part)
DRAFT_STAGE_COLUMNS = ["draft_ns", "queue_ns", "batch_rows", "early_ns", "hop_ex_draft_ns", "stage_ns", "back_ns",
                       "server_ns", "hop_ex_server_ns"]


def sample_columns(gpu: bool, codec: bool = False, load: bool = False, stream: bool = False,
                   draft: bool = False) -> list[str]:
    cols = SAMPLE_COLUMNS + GPU_COLUMNS + STAGE_COLUMNS if gpu else list(SAMPLE_COLUMNS)
    cols = cols + CODEC_COLUMNS + CODEC_STAGE_COLUMNS + ["wire_bytes"] if codec else cols
    cols = cols + LOAD_SAMPLE if load else cols
    cols = cols + [c for c in STREAM_STAGE_COLUMNS if c not in cols] if stream else cols
    return cols + DRAFT_STAGE_COLUMNS if draft else cols


def stage_summary_keys(stage_column: str) -> tuple[str, str, str]:
    """the summary's p50 and CI columns for one stage column ("d2h_ns" -> "d2h_p50_ns", ...);
    a column that is not a time keeps its unit off ("batch_rows" -> "batch_rows_p50", ...)."""
    base, unit = (stage_column.removesuffix("_ns"), "_ns") if stage_column.endswith("_ns") else (stage_column, "")
    return f"{base}_p50{unit}", f"{base}_p50_ci_lo{unit}", f"{base}_p50_ci_hi{unit}"


def summary_columns(gpu: bool, codec: bool = False, load: bool = False, stream: bool = False,
                    draft: bool = False) -> list[str]:
    cols = SUMMARY_COLUMNS + (GPU_COLUMNS + [k for s in STAGE_COLUMNS for k in stage_summary_keys(s)] if gpu else [])
    if codec:
        cols = cols + CODEC_COLUMNS + CODEC_SUMMARY + [k for s in CODEC_STAGE_COLUMNS for k in stage_summary_keys(s)]
    cols = cols + LOAD_SUMMARY if load else cols
    cols = cols + [k for s in STREAM_STAGE_COLUMNS for k in stage_summary_keys(s)] if stream else cols
    return cols + [k for s in DRAFT_STAGE_COLUMNS for k in stage_summary_keys(s)] + ["draft_floor_ratio"] \
        if draft else cols
