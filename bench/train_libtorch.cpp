/* train_libtorch: the libtorch (PyTorch's C++ API) side of the training
 * benchmark. It trains the two models of bench/train_bench.c with
 * torch::nn and torch::optim::Adam, on the same batches, with the same
 * hyperparameters and the same timing, with torch::set_num_threads(N)
 * (default 2: varq runs its threaded engine with 2 workers). It is the
 * peer without an interpreter: bench/train_torch.py is the same loop in
 * PyTorch eager through Python. scripts/train_bench.sh runs all three.
 *
 *   seed  x = ones[16,16], label = ones[16,1], Linear(16 -> 1), MSE,
 *         Adam lr 0.001
 *   mlp   Linear(64 -> 128), ReLU, Linear(128 -> 10), cross-entropy, Adam
 *         lr 0.005; batch b = rows [64 b, 64 b + 64) of DIR/train_x.npy
 *         (f32[n,64]) and DIR/train_y.npy (i64[n]), b = 0 .. n/64 - 1, step
 *         s on batch s mod (n/64); without the files, the 22 synthetic
 *         batches train_bench.c makes (the same splitmix64 stream)
 *
 * A step is: drop the gradients (set to none, as train_torch.py's
 * zero_grad(set_to_none=True)), forward, loss, backward, Adam step, and
 * loss.item<float>(), as varq's sync loop fetches and reads the loss of
 * each step. Each model: W warm-up steps, then R repetitions of K timed
 * steps, the step counter (which picks the batch) running on across them;
 * reported: the median (min..max) over the repetitions of K / seconds.
 *
 * With --init-dir DIR (written by train_bench --init-dir DIR) the weights
 * start from varq's: DIR/<model>/<layer>.w.npy is varq's W [in, out] of
 * y = x W + b, nn::Linear's weight is its transpose. The JSON then carries
 * the losses of the first steps, which scripts/train_bench.sh compares with
 * varq's. Without it, libtorch's own initialization (same distribution).
 *
 * usage: train_libtorch [--tiny] [--json FILE] [--digits DIR] [--threads N]
 *                       [--steps-seed K] [--steps-mlp K] [--reps R]
 *                       [--warmup W] [--init-dir DIR]
 *   --tiny  a few steps of each model; exits 1 unless the loss decreases
 *           (as it does in every mode). No timing is asserted. */
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kBatch = 64;
constexpr int kSynthBatches = 22; // as many full batches as the digits training set has
constexpr int kFirstLosses = 64;  // losses of the first steps kept for the comparison

struct Config {
    bool tiny = false;
    std::string json, digits = "build/digits", init_dir;
    int threads = 2, steps_seed = 5000, steps_mlp = 1000, reps = 5, warmup = 200;
};

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/* ---- .npy files: the little-endian C-order float32 and int64 arrays
 * numpy.save and vq_npy_save write (format versions 1 to 3) ---- */

struct Npy {
    std::string descr; // "<f4" or "<i8"
    std::vector<int64_t> shape;
    std::vector<char> data;
};

// The value of 'key' in the header's dict literal, up to the next ',' or '}'
// outside parentheses; "" when absent.
std::string header_field(const std::string &h, const std::string &key)
{
    size_t p = h.find("'" + key + "'");
    if (p == std::string::npos)
        return "";
    p = h.find(':', p);
    if (p == std::string::npos)
        return "";
    size_t e = p + 1;
    int depth = 0;
    for (; e < h.size(); e++) {
        if (h[e] == '(')
            depth++;
        else if (h[e] == ')')
            depth--;
        else if (depth == 0 && (h[e] == ',' || h[e] == '}'))
            break;
    }
    std::string v = h.substr(p + 1, e - p - 1);
    v.erase(0, v.find_first_not_of(" '"));
    v.erase(v.find_last_not_of(" '") + 1);
    return v;
}

Npy npy_read(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::runtime_error("cannot open " + path);
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
        throw std::runtime_error(path + ": not a .npy file");
    uint32_t hlen = 0;
    unsigned char b[4] = {0, 0, 0, 0};
    int nlen = magic[6] == 1 ? 2 : 4; // version 1: 2-byte length; 2 and 3: 4 bytes
    if (!f.read(reinterpret_cast<char *>(b), nlen))
        throw std::runtime_error(path + ": truncated header");
    hlen = b[0] | b[1] << 8 | static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
    std::string h(hlen, '\0');
    if (!f.read(&h[0], hlen))
        throw std::runtime_error(path + ": truncated header");
    Npy a;
    a.descr = header_field(h, "descr");
    if (header_field(h, "fortran_order") != "False")
        throw std::runtime_error(path + ": only C-order arrays are read");
    std::string s = header_field(h, "shape"); // "(64, 128)", "(10,)", "()"
    int64_t numel = 1;
    for (size_t i = 0; i < s.size();) {
        if (s[i] >= '0' && s[i] <= '9') {
            size_t used = 0;
            int64_t d = std::stoll(s.substr(i), &used);
            a.shape.push_back(d);
            numel *= d;
            i += used;
        } else
            i++;
    }
    size_t elem = a.descr == "<f4" ? 4 : a.descr == "<i8" ? 8 : 0;
    if (!elem)
        throw std::runtime_error(path + ": dtype " + a.descr + " (only <f4 and <i8 are read)");
    a.data.resize(static_cast<size_t>(numel) * elem);
    if (!f.read(a.data.data(), static_cast<std::streamsize>(a.data.size())))
        throw std::runtime_error(path + ": truncated data");
    return a;
}

torch::Tensor npy_tensor(const Npy &a)
{
    auto dt = a.descr == "<f4" ? torch::kFloat32 : torch::kInt64;
    return torch::from_blob(const_cast<char *>(a.data.data()), a.shape, dt).clone();
}

/* ---- models and batches ---- */

struct Model {
    std::string name, data, init = "torch";
    torch::nn::Sequential net;
    std::vector<torch::Tensor> bx, by;
    bool mse = false; // MSE (seed) or softmax cross-entropy (mlp)
    double lr = 0;
};

// varq's y = x W + b keeps W as [in, out]: nn::Linear's weight is W^T.
bool load_linear(torch::nn::Linear &l, const Config &c, const std::string &model,
                 const std::string &layer)
{
    if (c.init_dir.empty())
        return false;
    std::string d = c.init_dir + "/" + model + "/" + layer;
    torch::Tensor w = npy_tensor(npy_read(d + ".w.npy"));
    torch::Tensor b = npy_tensor(npy_read(d + ".b.npy"));
    torch::NoGradGuard ng;
    l->weight.copy_(w.t().reshape_as(l->weight));
    l->bias.copy_(b.reshape_as(l->bias));
    return true;
}

Model make_seed(const Config &c)
{
    Model m;
    m.name = "seed";
    m.data = "ones";
    m.mse = true;
    m.lr = 0.001;
    torch::manual_seed(2026);
    torch::nn::Linear out(16, 1);
    if (load_linear(out, c, "seed", "out"))
        m.init = "varq";
    m.net = torch::nn::Sequential(out);
    m.bx.push_back(torch::ones({16, 16}));
    m.by.push_back(torch::ones({16, 1}));
    return m;
}

// splitmix64, as train_bench.c, for the synthetic batches
uint64_t splitmix64(uint64_t &s)
{
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Model make_mlp(const Config &c)
{
    Model m;
    m.name = "mlp";
    m.lr = 0.005;
    torch::manual_seed(1);
    torch::nn::Linear h1(64, 128), logits(128, 10);
    bool a = load_linear(h1, c, "mlp", "h1");
    bool b = load_linear(logits, c, "mlp", "logits");
    if (a && b)
        m.init = "varq";
    m.net = torch::nn::Sequential(h1, torch::nn::ReLU(), logits);

    std::string px = c.digits + "/train_x.npy", py = c.digits + "/train_y.npy";
    if (std::ifstream(px).good() && std::ifstream(py).good()) {
        torch::Tensor x = npy_tensor(npy_read(px)), y = npy_tensor(npy_read(py));
        if (x.scalar_type() != torch::kFloat32 || x.dim() != 2 || x.size(1) != 64 ||
            y.scalar_type() != torch::kInt64 || y.dim() != 1 || y.size(0) != x.size(0) ||
            x.size(0) < kBatch)
            throw std::runtime_error(c.digits + ": train_x must be f32[n,64] and train_y i64[n]");
        for (int64_t i = 0; i + kBatch <= x.size(0); i += kBatch) {
            m.bx.push_back(x.slice(0, i, i + kBatch).contiguous());
            m.by.push_back(y.slice(0, i, i + kBatch).contiguous());
        }
        m.data = "digits";
        return m;
    }
    uint64_t rng = 20260101;
    for (int b = 0; b < kSynthBatches; b++) {
        torch::Tensor x = torch::empty({kBatch, 64});
        torch::Tensor y = torch::empty({kBatch}, torch::kInt64);
        float *xd = x.data_ptr<float>();
        int64_t *yd = y.data_ptr<int64_t>();
        for (int i = 0; i < kBatch * 64; i++)
            xd[i] = static_cast<float>(splitmix64(rng) >> 40) * (1.0f / 16777216.0f);
        for (int i = 0; i < kBatch; i++)
            yd[i] = static_cast<int64_t>(splitmix64(rng) % 10);
        m.bx.push_back(x);
        m.by.push_back(y);
    }
    m.data = "synthetic";
    return m;
}

/* ---- the training loop ---- */

struct Result {
    std::string model;
    int steps = 0, reps = 0;
    double median = 0, min = 0, max = 0;
    std::vector<double> per_rep;
    std::vector<float> losses; // every loss (to check the trend)
    long total_steps = 0;
};

double median_of(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Result bench(Model &m, int k, const Config &c)
{
    torch::optim::Adam opt(m.net->parameters(), torch::optim::AdamOptions(m.lr));
    std::vector<torch::Tensor> params = m.net->parameters();
    Result r;
    r.model = m.name;
    r.steps = k;
    r.reps = c.reps;
    long step = 0;
    size_t nb = m.bx.size();
    for (int rep = -1; rep < c.reps; rep++) { // rep = -1: the warm-up
        int n = rep < 0 ? c.warmup : k;
        double t0 = now();
        for (int i = 0; i < n; i++, step++) {
            const torch::Tensor &x = m.bx[static_cast<size_t>(step) % nb];
            const torch::Tensor &y = m.by[static_cast<size_t>(step) % nb];
            for (auto &p : params) // zero_grad(set_to_none=True)
                p.mutable_grad().reset();
            torch::Tensor out = m.net->forward(x);
            torch::Tensor loss = m.mse ? torch::mse_loss(out, y)
                                       : torch::nn::functional::cross_entropy(out, y);
            loss.backward();
            opt.step();
            r.losses.push_back(loss.item<float>());
        }
        double dt = now() - t0;
        if (rep >= 0)
            r.per_rep.push_back(n / dt);
    }
    r.median = median_of(r.per_rep);
    r.min = *std::min_element(r.per_rep.begin(), r.per_rep.end());
    r.max = *std::max_element(r.per_rep.begin(), r.per_rep.end());
    r.total_steps = step;
    return r;
}

// The loss went down: the last steps' mean below the first steps' mean
// (train_bench.c's rule).
bool loss_decreased(const std::vector<float> &l)
{
    size_t n = l.size(), w = std::max<size_t>(1, std::min<size_t>(5, n / 4));
    double a = 0, b = 0;
    for (size_t i = 0; i < w; i++) {
        a += l[i];
        b += l[n - 1 - i];
    }
    return b < a;
}

bool write_json(const Config &c, const std::vector<Model> &ms, const std::vector<Result> &rs)
{
    FILE *f = std::fopen(c.json.c_str(), "w");
    if (!f) {
        std::fprintf(stderr, "train_libtorch: cannot write %s\n", c.json.c_str());
        return false;
    }
    char date[32];
    time_t t = time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    std::fprintf(f,
                 "{\"runtime\":\"libtorch\",\"version\":\"%s\",\"date\":\"%s\",\"threads\":%d,"
                 "\"warmup\":%d,\n\"models\":[",
                 TORCH_VERSION, date, torch::get_num_threads(), c.warmup);
    for (size_t i = 0; i < rs.size(); i++) {
        const Result &r = rs[i];
        std::fprintf(f,
                     "%s\n{\"model\":\"%s\",\"data\":\"%s\",\"batches\":%zu,\"init\":\"%s\","
                     "\"steps\":%d,\"reps\":%d,\"median_steps_per_s\":%.1f,"
                     "\"min_steps_per_s\":%.1f,\"max_steps_per_s\":%.1f,\"per_rep\":[",
                     i ? "," : "", r.model.c_str(), ms[i].data.c_str(), ms[i].bx.size(),
                     ms[i].init.c_str(), r.steps, r.reps, r.median, r.min, r.max);
        for (size_t j = 0; j < r.per_rep.size(); j++)
            std::fprintf(f, "%s%.1f", j ? "," : "", r.per_rep[j]);
        std::fprintf(f, "],\"first_loss\":%.9g,\"last_loss\":%.9g,\"total_steps\":%ld,"
                        "\"first_losses\":[",
                     r.losses.front(), r.losses.back(), r.total_steps);
        size_t nl = std::min<size_t>(kFirstLosses, r.losses.size());
        for (size_t j = 0; j < nl; j++)
            std::fprintf(f, "%s%.9g", j ? "," : "", r.losses[j]);
        std::fprintf(f, "]}");
    }
    std::fprintf(f, "\n]}\n");
    return std::fclose(f) == 0;
}

void usage(const char *argv0)
{
    std::fprintf(stderr,
                 "usage: %s [--tiny] [--json FILE] [--digits DIR] [--threads N]\n"
                 "       [--steps-seed K] [--steps-mlp K] [--reps R] [--warmup W] "
                 "[--init-dir DIR]\n",
                 argv0);
}

} // namespace

int main(int argc, char **argv)
{
    Config c;
    int steps_seed = 0, steps_mlp = 0, reps = 0, warmup = -1;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool has = i + 1 < argc;
        if (a == "--tiny")
            c.tiny = true;
        else if (a == "--json" && has)
            c.json = argv[++i];
        else if (a == "--digits" && has)
            c.digits = argv[++i];
        else if (a == "--init-dir" && has)
            c.init_dir = argv[++i];
        else if (a == "--threads" && has)
            c.threads = std::atoi(argv[++i]);
        else if (a == "--steps-seed" && has)
            steps_seed = std::atoi(argv[++i]);
        else if (a == "--steps-mlp" && has)
            steps_mlp = std::atoi(argv[++i]);
        else if (a == "--reps" && has)
            reps = std::atoi(argv[++i]);
        else if (a == "--warmup" && has)
            warmup = std::atoi(argv[++i]);
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (c.tiny) {
        c.steps_seed = 100;
        c.steps_mlp = 30;
        c.reps = 2;
        c.warmup = 10;
    }
    if (steps_seed > 0)
        c.steps_seed = steps_seed;
    if (steps_mlp > 0)
        c.steps_mlp = steps_mlp;
    if (reps > 0)
        c.reps = reps;
    if (warmup >= 0)
        c.warmup = warmup;
    if (c.threads < 1) {
        usage(argv[0]);
        return 2;
    }

    try {
        torch::set_num_threads(c.threads);
        std::vector<Model> ms;
        ms.push_back(make_seed(c));
        ms.push_back(make_mlp(c));
        std::printf("libtorch %s training steps/s: %d threads; %d warm-up steps, then %d "
                    "repetitions; median (min..max) of steps / second; loss.item() every step\n",
                    TORCH_VERSION, torch::get_num_threads(), c.warmup, c.reps);
        std::printf("\n%-5s %6s %26s %12s %12s\n", "model", "steps", "steps/s", "first loss",
                    "last loss");
        std::vector<Result> rs;
        int status = 0;
        for (size_t i = 0; i < ms.size(); i++) {
            int k = i == 0 ? c.steps_seed : c.steps_mlp;
            rs.push_back(bench(ms[i], k, c));
            const Result &r = rs.back();
            char cell[64];
            std::snprintf(cell, sizeof cell, "%.0f (%.0f..%.0f)", r.median, r.min, r.max);
            std::printf("%-5s %6d %26s %12.6g %12.6g   [%s data, %zu batches, %s init]\n",
                        r.model.c_str(), k, cell, r.losses.front(), r.losses.back(),
                        ms[i].data.c_str(), ms[i].bx.size(), ms[i].init.c_str());
            std::fflush(stdout);
            if (!loss_decreased(r.losses)) {
                std::fprintf(stderr, "train_libtorch: %s: the loss did not decrease\n",
                             r.model.c_str());
                status = 1;
            }
        }
        if (status == 0 && !c.json.empty() && !write_json(c, ms, rs))
            status = 1;
        return status;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "train_libtorch: %s\n", e.what());
        return 1;
    }
}
