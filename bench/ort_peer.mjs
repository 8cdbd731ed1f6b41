// ONNX Runtime (CPU, through the onnxruntime-node binding) as a benchmark
// peer: loads an ONNX model, feeds it .npy arrays, times repeated runs after
// a warm-up and prints one machine-readable line, so that
// bench/models_vs_ort.py can compare it with varq on the same inputs.
// The package comes from scripts/ort_fetch.sh (never a dependency of the
// build or the tests).
//
// usage: node bench/ort_peer.mjs --module DIR --model M.onnx
//          --feed NAME=X.npy ... [--fetch NAME=Y.npy ...]
//          [--repeat N] [--warmup W] [--threads T] [--inter 1]
//          [--profile PREFIX] [--spin 0|1]
// Output (one line on stdout, key=value separated by spaces):
//   ort_peer runs=N median_ms= min_ms= max_ms= p10_ms= p90_ms= mean_ms=
//            load_ms= base_rss_kb= peak_rss_kb=
// base_rss_kb is the process's resident set before the session was made
// (node itself), peak_rss_kb its high-water mark (VmHWM) at the end.
// --profile PREFIX turns on ONNX Runtime's own profiler (every node's
// kernel time, Chrome trace format) and adds profile=FILE to the line:
// ORT names the file PREFIX_<date and time>.json.
// --decode N instead greedy-decodes N tokens: the one feed holds int64
// token ids [1, L]; each step runs the model on the whole sequence, takes
// the argmax of the first output's last position and appends it (no
// cache, as scripts/dynamic_models_check.py does with varq and PyTorch),
// after one warm-up run; prints
//   ort_peer decode=N secs= tokens_per_s= tokens=ID,ID,...
// (the whole final sequence).
// --spin 0 sets session.intra_op.allow_spinning to 0: idle intra-op
// threads sleep instead of spinning (ORT's default, 1, spins a while after
// each parallel section, which on a shared machine takes cores from others).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

function usage(msg) {
  process.stderr.write(`ort_peer.mjs: ${msg}\n`);
  process.exit(2);
}

const args = { feed: [], fetch: [], repeat: 20, warmup: 3, threads: 2, inter: 1 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i];
  const v = argv[i + 1];
  if (v === undefined) usage(`${k} needs a value`);
  i++;
  switch (k) {
    case '--module': args.module = v; break;
    case '--model': args.model = v; break;
    case '--feed': args.feed.push(v); break;
    case '--fetch': args.fetch.push(v); break;
    case '--repeat': args.repeat = parseInt(v, 10); break;
    case '--warmup': args.warmup = parseInt(v, 10); break;
    case '--threads': args.threads = parseInt(v, 10); break;
    case '--inter': args.inter = parseInt(v, 10); break;
    case '--profile': args.profile = v; break;
    case '--spin': args.spin = v; break;
    case '--decode': args.decode = parseInt(v, 10); break;
    default: usage(`unknown option ${k}`);
  }
}
if (!args.module || !args.model) usage('--module and --model are required');

function vmKb(key) {
  const m = fs.readFileSync('/proc/self/status', 'utf8').match(new RegExp(`^${key}:\\s+(\\d+)`, 'm'));
  return m ? parseInt(m[1], 10) : 0;
}

// The .npy formats numpy writes for the arrays the benchmark uses: version
// 1.0/2.0/3.0 headers, little-endian, C order.
const DTYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array],
  '|b1': ['bool', Uint8Array], '|u1': ['uint8', Uint8Array], '|i1': ['int8', Int8Array],
};
const NPY_OF = { float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', bool: '|b1', uint8: '|u1', int8: '|i1' };

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = header.match(/'descr':\s*'([^']+)'/)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = header.match(/'shape':\s*\(([^)]*)\)/)[1].split(',').map((s) => s.trim())
    .filter((s) => s.length).map((s) => parseInt(s, 10));
  const dt = DTYPES[descr];
  if (!dt) throw new Error(`${file}: dtype ${descr} not handled`);
  const off = hstart + hlen;
  const bytes = buf.subarray(off);
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  const data = new dt[1](copy.buffer, 0, bytes.length / dt[1].BYTES_PER_ELEMENT);
  return { type: dt[0], data, shape };
}

function writeNpy(file, t) {
  const descr = NPY_OF[t.type];
  if (!descr) throw new Error(`${file}: type ${t.type} not handled`);
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const h = Buffer.alloc(10);
  h.write('\x93NUMPY', 0, 'latin1');
  h[6] = 1; h[7] = 0;
  h.writeUInt16LE(header.length, 8);
  const d = t.data;
  fs.writeFileSync(file, Buffer.concat([h, Buffer.from(header, 'latin1'),
    Buffer.from(d.buffer, d.byteOffset, d.byteLength)]));
}

const require = createRequire(path.resolve(args.module, 'package.json'));
const ort = require(path.resolve(args.module));

const baseRss = vmKb('VmRSS');
const feeds = {};
for (const f of args.feed) {
  const eq = f.indexOf('=');
  const a = readNpy(f.slice(eq + 1));
  feeds[f.slice(0, eq)] = new ort.Tensor(a.type, a.data, a.shape);
}

const t0 = performance.now();
const session = await ort.InferenceSession.create(args.model, {
  intraOpNumThreads: args.threads,
  interOpNumThreads: args.inter,
  graphOptimizationLevel: 'all',
  executionMode: 'sequential',
  ...(args.profile ? { enableProfiling: true, profileFilePrefix: args.profile } : {}),
  ...(args.spin !== undefined ? { extra: { session: { intra_op: { allow_spinning: args.spin } } } } : {}),
});
const loadMs = performance.now() - t0;

if (args.decode > 0) {
  const name = Object.keys(feeds)[0];
  let ids = Array.from(feeds[name].data);
  await session.run(feeds); // warm-up
  const s = performance.now();
  for (let step = 0; step < args.decode; step++) {
    const res = await session.run({ [name]: new ort.Tensor('int64', BigInt64Array.from(ids), [1, ids.length]) });
    const y = res[session.outputNames[0]];
    const vocab = y.dims[y.dims.length - 1];
    const last = y.data.subarray(y.data.length - vocab);
    let best = 0;
    for (let k = 1; k < vocab; k++) if (last[k] > last[best]) best = k;
    ids.push(BigInt(best));
  }
  const secs = (performance.now() - s) / 1e3;
  process.stdout.write(`ort_peer decode=${args.decode} secs=${secs.toFixed(4)} ` +
    `tokens_per_s=${(args.decode / secs).toFixed(2)} tokens=${ids.join(',')}\n`);
  process.exit(0);
}

let out;
for (let i = 0; i < args.warmup; i++) out = await session.run(feeds);
const times = [];
for (let i = 0; i < args.repeat; i++) {
  const s = performance.now();
  out = await session.run(feeds);
  times.push(performance.now() - s);
}
if (!out) out = await session.run(feeds);
for (const f of args.fetch) {
  const eq = f.indexOf('=');
  const name = f.slice(0, eq);
  if (!out[name]) throw new Error(`no output ${name}; outputs: ${Object.keys(out).join(',')}`);
  writeNpy(f.slice(eq + 1), out[name]);
}

let profileFile = '';
if (args.profile) {
  // endProfiling writes the file; the binding does not hand its name back
  const before = new Date();
  session.endProfiling();
  const dir = path.dirname(path.resolve(args.profile));
  const base = path.basename(args.profile);
  const made = fs.readdirSync(dir).filter((f) => f.startsWith(`${base}_`) && f.endsWith('.json'))
    .map((f) => path.join(dir, f)).filter((f) => fs.statSync(f).mtime >= new Date(before - 60e3))
    .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
  profileFile = made.length ? ` profile=${made[0]}` : '';
}

times.sort((a, b) => a - b);
const q = (p) => times[Math.min(times.length - 1, Math.floor(p * (times.length - 1) + 0.5))];
const mean = times.reduce((a, b) => a + b, 0) / Math.max(1, times.length);
const fx = (x) => (x === undefined ? 'nan' : x.toFixed(4));
process.stdout.write(`ort_peer runs=${times.length} median_ms=${fx(q(0.5))} min_ms=${fx(times[0])} ` +
  `max_ms=${fx(times[times.length - 1])} p10_ms=${fx(q(0.1))} p90_ms=${fx(q(0.9))} ` +
  `mean_ms=${fx(mean)} load_ms=${loadMs.toFixed(1)} base_rss_kb=${baseRss} ` +
  `peak_rss_kb=${vmKb('VmHWM')}${profileFile}\n`);
