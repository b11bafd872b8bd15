"""`retnet serve --cache-dir`: the prompt cache survives a restart (the same request then restores
its prefix from disk and gives the same text), a damaged cache file is skipped with a log line,
and with --cache-type bf16 the files hold bf16 states that serve after a restart. The byte bound
and the file format are tested in test_prompt_cache_disk.cpp and test_prompt_cache_bf16.cpp."""
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, check, finish, parse_args, tiny_model  # noqa: E402

PROMPT = "A cache on disk keeps the states of long prompts across restarts. " * 4
REQUEST = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0.8, "seed": 3}


def serve(retnet, model, workdir, name, cache_dir, *more):
    return Server(retnet, model, workdir, name, "--cache-dir", cache_dir, "--parallel", "1",
                  "--no-ui", *more)


def completion(s):
    st, r = s.json("POST", "/v1/completions", REQUEST)
    check(st == 200, f"completion: {st} {r}")
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_bf16_files(retnet, model, workdir):
    """--cache-type bf16 writes bf16 states to --cache-dir (their header says so, and they are
    smaller than f32 ones); after a restart the same request restores its prefix from disk and
    gives the text a memory-tier hit gives (the very same rounded state); an f32 server reads
    them too."""
    exact_dir = os.path.join(workdir, "prompt-cache-f32")
    half_dir = os.path.join(workdir, "prompt-cache-bf16")
    for d in (exact_dir, half_dir):
        shutil.rmtree(d, ignore_errors=True)
    s = serve(retnet, model, workdir, "f32-files", exact_dir)
    try:
        completion(s)
    finally:
        s.stop()
    s = serve(retnet, model, workdir, "bf16-files", half_dir, "--cache-type", "bf16")
    try:
        completion(s)
        from_memory, cached = completion(s)
        check(cached > 0, f"bf16: the second request hits the memory tier: cached {cached}")
    finally:
        s.stop()
    sizes = {}
    for d in (exact_dir, half_dir):
        files = glob.glob(os.path.join(d, "*.prompt"))
        check(len(files) >= 1, f"states written to {d}: {files}")
        sizes[d] = sum(os.path.getsize(f) for f in files)
    half_files = glob.glob(os.path.join(half_dir, "*.prompt"))
    check(all(b'"state_dtype":"bf16"' in open(f, "rb").read() for f in half_files),
          "each bf16 file's header records its type")
    check(sizes[half_dir] < sizes[exact_dir],
          f"bf16 files are smaller: {sizes[half_dir]} vs {sizes[exact_dir]} bytes")
    for name, more in (("bf16-restarted", ("--cache-type", "bf16")), ("f32-reads-bf16", ())):
        s = serve(retnet, model, workdir, name, half_dir, *more)
        try:
            again, cached = completion(s)
            check(cached > 0, f"{name}: the prefix comes from the bf16 file: cached {cached}")
            check(again == from_memory,
                  f"{name}: the text of a memory-tier hit: {again!r} vs {from_memory!r}")
            check(s.metric("retnet_prompt_cache_disk_hits_total") == 1, f"{name}: one disk hit")
        finally:
            s.stop()
        log = open(s.log_path).read()
        check("skipping" not in log, f"{name}: no file skipped: {log[-400:]}")


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    cache_dir = os.path.join(a.workdir, "prompt-cache")
    shutil.rmtree(cache_dir, ignore_errors=True)

    s = serve(a.retnet, model, a.workdir, "first", cache_dir)
    try:
        text, cached = completion(s)
        check(cached == 0, f"the first request finds nothing cached: {cached}")
    finally:
        s.stop()
    files = glob.glob(os.path.join(cache_dir, "*.prompt"))
    check(len(files) >= 1, f"the cache's states are written to --cache-dir: {files}")

    s = serve(a.retnet, model, a.workdir, "restarted", cache_dir)
    try:
        again, cached = completion(s)
        check(cached > 0, f"after a restart the prefix comes from disk: cached {cached}")
        check(again == text, f"the same text after the restart: {again!r} vs {text!r}")
        check(s.metric("retnet_prompt_cache_disk_hits_total") == 1, "one disk hit counted")
    finally:
        s.stop()

    # Damage every file's last bytes (the state's checksum): the next server skips them all,
    # says so, and still answers the same text by prefilling.
    for path in glob.glob(os.path.join(cache_dir, "*.prompt")):
        with open(path, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(b"\xde\xad\xbe\xef")
    s = serve(a.retnet, model, a.workdir, "damaged", cache_dir)
    try:
        again, cached = completion(s)
        check(cached == 0, f"a damaged file is not trusted: cached {cached}")
        check(again == text, "the same text without the damaged cache")
    finally:
        s.stop()
    log = open(s.log_path).read()
    check("skipping and removing" in log and "checksum mismatch" in log,
          f"the damaged file is named in the log: {log[-600:]}")

    test_bf16_files(a.retnet, model, a.workdir)
    finish("disk cache tests")


if __name__ == "__main__":
    main()
