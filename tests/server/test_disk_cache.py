"""`retnet serve --cache-dir`: the prompt cache survives a restart (the same request then restores
its prefix from disk and gives the same text), and a damaged cache file is skipped with a log
line. The byte bound and the file format are tested in test_prompt_cache_disk.cpp."""
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

    finish("disk cache tests")


if __name__ == "__main__":
    main()
