/* One pass over a pair of chunks: the loop behind compare/metrics.py ErrorStats.add.
 *
 * Every element is loaded once: fp16 is widened from its bits, t - r and every statistic are accumulated
 * in double in the same loop, nothing is allocated. IEEE arithmetic (no fast-math, so NaN/Inf keep their
 * meaning); only the order of the reductions is left to the compiler (OpenMP simd), so the last bits of
 * a sum may differ between machines. A chunk holding any NaN/Inf is redone by the masked loop, which
 * counts them per side and keeps only the pairs where both values are finite.
 *
 * Built on first use by metrics.py (cc -O3 -march=native -fopenmp-simd -shared), loaded with ctypes. Element types: fp16 (as its
 * uint16 bits), float32, float64; strides in elements, so non-contiguous views need no copy.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t pairs, t_nan, t_inf, r_nan, r_inf, outside;
    double sd, sr, srd, max_d, max_r, min_r;
} qd_stats;

/* value as double, and 0 finite / 1 inf / 2 NaN */
static inline double load_f16(const void *p, ptrdiff_t i, int *special) {
    uint16_t h = ((const uint16_t *)p)[i];
    uint32_t u = ((uint32_t)(h & 0x8000u) << 16) | ((uint32_t)(h & 0x7FFFu) << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    *special = ((h & 0x7C00u) == 0x7C00u) * (1 + ((h & 0x3FFu) != 0));
    return (double)(f * 0x1p112f); /* rebias the exponent: exact, subnormals included */
}

static inline double load_f32(const void *p, ptrdiff_t i, int *special) {
    float f = ((const float *)p)[i];
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *special = ((u & 0x7F800000u) == 0x7F800000u) * (1 + ((u & 0x7FFFFFu) != 0));
    return (double)f;
}

static inline double load_f64(const void *p, ptrdiff_t i, int *special) {
    double f = ((const double *)p)[i];
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    *special = ((u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) * (1 + ((u & 0xFFFFFFFFFFFFFull) != 0));
    return f;
}

/* The branch-free loop, assuming every value is finite; returns nonzero when one was not. The OpenMP
 * simd reductions (compiled with -fopenmp-simd: no threads, no runtime) are the only place where the
 * order of the additions is left to the compiler. */
#define FINITE_LOOP(LOAD_T, LOAD_R, TS, RS)                                                                 \
    _Pragma("omp simd reduction(+:sd,sr,srd,out) reduction(max:md,mx) reduction(min:mn) reduction(|:bad)") \
    for (int64_t i = 0; i < n; i++) {                                                                       \
        int a, b;                                                                                           \
        double tv = LOAD_T(t, i * (TS), &a);                                                                \
        double rv = LOAD_R(r, i * (RS), &b);                                                                \
        bad |= a | b;                                                                                       \
        double d = tv - rv;                                                                                 \
        double ad = __builtin_fabs(d);                                                                      \
        sd += d * d;                                                                                        \
        sr += rv * rv;                                                                                      \
        srd += rv * d;                                                                                      \
        md = ad > md ? ad : md;                                                                             \
        mx = rv > mx ? rv : mx;                                                                             \
        mn = rv < mn ? rv : mn;                                                                             \
        out += ad > atol + rtol * __builtin_fabs(rv);                                                       \
    }

#define DEFINE_PASS(NAME, LOAD_T, LOAD_R)                                                                   \
    static void NAME##_masked(const void *t, ptrdiff_t ts, const void *r, ptrdiff_t rs, int64_t n,          \
                              double atol, double rtol, qd_stats *s) {                                     \
        memset(s, 0, sizeof *s);                                                                            \
        s->max_r = -__builtin_inf();                                                                        \
        s->min_r = __builtin_inf();                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                                   \
            int a, b;                                                                                       \
            double tv = LOAD_T(t, i * ts, &a), rv = LOAD_R(r, i * rs, &b);                                  \
            if (a == 2) s->t_nan++;                                                                         \
            if (a == 1) s->t_inf++;                                                                         \
            if (b == 2) s->r_nan++;                                                                         \
            if (b == 1) s->r_inf++;                                                                         \
            if (a | b) continue;                                                                            \
            double d = tv - rv, ad = __builtin_fabs(d);                                                     \
            s->pairs++;                                                                                     \
            s->sd += d * d;                                                                                 \
            s->sr += rv * rv;                                                                               \
            s->srd += rv * d;                                                                               \
            s->max_d = ad > s->max_d ? ad : s->max_d;                                                       \
            s->max_r = rv > s->max_r ? rv : s->max_r;                                                       \
            s->min_r = rv < s->min_r ? rv : s->min_r;                                                       \
            s->outside += ad > atol + rtol * __builtin_fabs(rv);                                            \
        }                                                                                                   \
    }                                                                                                       \
                                                                                                            \
    void NAME(const void *t, ptrdiff_t ts, const void *r, ptrdiff_t rs, int64_t n, double atol,             \
              double rtol, qd_stats *s) {                                                                   \
        double sd = 0, sr = 0, srd = 0, md = 0, mx = -__builtin_inf(), mn = __builtin_inf();                \
        int64_t out = 0;                                                                                    \
        int bad = 0;                                                                                        \
        if (ts == 1 && rs == 1) {                                                                           \
            FINITE_LOOP(LOAD_T, LOAD_R, 1, 1)                                                               \
        } else {                                                                                            \
            FINITE_LOOP(LOAD_T, LOAD_R, ts, rs)                                                             \
        }                                                                                                   \
        if (bad) {                                                                                          \
            NAME##_masked(t, ts, r, rs, n, atol, rtol, s);                                                  \
            return;                                                                                         \
        }                                                                                                   \
        s->pairs = n;                                                                                       \
        s->t_nan = s->t_inf = s->r_nan = s->r_inf = 0;                                                      \
        s->sd = sd;                                                                                         \
        s->sr = sr;                                                                                         \
        s->srd = srd;                                                                                       \
        s->max_d = md;                                                                                      \
        s->max_r = mx;                                                                                      \
        s->min_r = mn;                                                                                      \
        s->outside = out;                                                                                   \
    }

DEFINE_PASS(qd_f16_f16, load_f16, load_f16)
DEFINE_PASS(qd_f16_f32, load_f16, load_f32)
DEFINE_PASS(qd_f16_f64, load_f16, load_f64)
DEFINE_PASS(qd_f32_f16, load_f32, load_f16)
DEFINE_PASS(qd_f32_f32, load_f32, load_f32)
DEFINE_PASS(qd_f32_f64, load_f32, load_f64)
DEFINE_PASS(qd_f64_f16, load_f64, load_f16)
DEFINE_PASS(qd_f64_f32, load_f64, load_f32)
DEFINE_PASS(qd_f64_f64, load_f64, load_f64)

int qd_abi_version(void) { return 1; }
