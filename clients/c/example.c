/* Sampan C API example: a starting point for embedding Sampan in a C program.
 *
 *   sampan_c_example MODEL_DIR [--ids 1,2,3] [--prompt TEXT] [--max-tokens N] [--threads N]
 *                    [--kv-cache-mib N] [--no-generate]
 *
 * 1. Tensor-model calls (Paddle Inference style): a predictor runs the token ids (default
 *    1,2,3,4,5) through the model and the top token of every position is printed.
 * 2. Generation: an engine generates greedily from the prompt, text streamed through a callback
 *    on the engine thread; the main thread waits for the request to finish.
 *
 * Output lines (stable, parsed by tests/e2e/test_capi.py):
 *   logits shape: B S V
 *   top[i]: ID LOGIT
 *   generated: TEXT-AS-STREAMED (printed as it comes, ended by a newline)
 *   tokens: ID ID ...
 *   finish: REASON prompt_tokens=P completion_tokens=C
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampan.h"

#define MAX_IDS 256
#define MAX_GENERATED 4096

/* Prints the failing call with the library's message and leaves. A real program would clean up
 * its handles; the process exit releases everything here. */
static void check(SampanStatus status, const char* what) {
  if (status != SAMPAN_OK) {
    fprintf(stderr, "error: %s: %s: %s\n", what, sampan_status_name(status), sampan_last_error());
    exit(1);
  }
}

static int parse_ids(const char* text, int64_t* ids, int64_t* n) {
  const char* p = text;
  *n = 0;
  while (*p != '\0') {
    char* end = NULL;
    long long v;
    errno = 0;
    v = strtoll(p, &end, 10);
    if (end == p || errno != 0 || *n == MAX_IDS) return 0;
    ids[(*n)++] = (int64_t)v;
    p = end;
    if (*p == ',') ++p;
    else if (*p != '\0') return 0;
  }
  return *n > 0;
}

static void run_predictor(SampanConfig* config, const int64_t* ids, int64_t n) {
  SampanPredictor* predictor = NULL;
  SampanTensor* input = NULL;
  SampanTensor* output = NULL;
  const char* input_name = NULL;
  const char* output_name = NULL;
  int64_t shape[2];
  int64_t out_shape[3];
  int32_t rank = 0;
  float* logits;
  int64_t pos, v, vocab;

  check(sampan_predictor_create(config, &predictor), "sampan_predictor_create");
  check(sampan_predictor_get_input_name(predictor, 0, &input_name), "get_input_name");
  check(sampan_predictor_get_output_name(predictor, 0, &output_name), "get_output_name");
  check(sampan_predictor_get_input_handle(predictor, input_name, &input), "get_input_handle");
  check(sampan_predictor_get_output_handle(predictor, output_name, &output), "get_output_handle");

  /* One sequence: input_ids [1, n] as i64. */
  shape[0] = 1;
  shape[1] = n;
  check(sampan_tensor_reshape(input, shape, 2), "sampan_tensor_reshape");
  check(sampan_tensor_copy_from_cpu(input, SAMPAN_DTYPE_I64, ids, (uint64_t)n * sizeof(int64_t)),
        "sampan_tensor_copy_from_cpu");
  check(sampan_predictor_run(predictor), "sampan_predictor_run");

  check(sampan_tensor_get_shape(output, out_shape, 3, &rank), "sampan_tensor_get_shape");
  vocab = out_shape[2];
  printf("logits shape: %lld %lld %lld\n", (long long)out_shape[0], (long long)out_shape[1],
         (long long)vocab);
  logits = (float*)malloc((size_t)(n * vocab) * sizeof(float));
  if (logits == NULL) {
    fprintf(stderr, "error: out of memory\n");
    exit(1);
  }
  check(sampan_tensor_copy_to_cpu(output, SAMPAN_DTYPE_F32, logits,
                                  (uint64_t)(n * vocab) * sizeof(float)),
        "sampan_tensor_copy_to_cpu");
  for (pos = 0; pos < n; ++pos) {
    const float* row = logits + pos * vocab;
    int64_t best = 0;
    for (v = 1; v < vocab; ++v) {
      if (row[v] > row[best]) best = v;
    }
    printf("top[%lld]: %lld %.4f\n", (long long)pos, (long long)best, row[best]);
  }
  free(logits);
  check(sampan_predictor_destroy(predictor), "sampan_predictor_destroy");
}

/* What the callback collects; the main thread reads it after sampan_request_wait. */
struct Generation {
  int32_t tokens[MAX_GENERATED];
  int n_tokens;
  char finish[16];
  int64_t prompt_tokens;
  int64_t completion_tokens;
};

/* Runs on the engine thread: only event getters and sampan_request_cancel are allowed here, and
 * it must be quick (every request of the engine waits for it). */
static void on_event(SampanRequest* request, const SampanEvent* event, void* user_data) {
  struct Generation* g = (struct Generation*)user_data;
  const char* text = NULL;
  uint64_t len = 0;
  int32_t token = -1;
  int32_t finished = 0;
  (void)request;
  if (sampan_event_get_token(event, &token) == SAMPAN_OK && token >= 0 &&
      g->n_tokens < MAX_GENERATED) {
    g->tokens[g->n_tokens++] = token;
  }
  if (sampan_event_get_text(event, &text, &len) == SAMPAN_OK && len > 0) {
    fwrite(text, 1, (size_t)len, stdout);
    fflush(stdout);
  }
  if (sampan_event_is_finished(event, &finished) == SAMPAN_OK && finished) {
    const char* name = "";
    sampan_event_get_finish_name(event, &name);
    strncpy(g->finish, name, sizeof(g->finish) - 1);
    sampan_event_get_usage(event, &g->prompt_tokens, &g->completion_tokens, NULL);
  }
}

static void run_generation(SampanConfig* config, const char* prompt, int64_t max_tokens) {
  SampanEngine* engine = NULL;
  SampanParams* params = NULL;
  SampanRequest* request = NULL;
  struct Generation* g = (struct Generation*)calloc(1, sizeof(struct Generation));
  int i;
  if (g == NULL) {
    fprintf(stderr, "error: out of memory\n");
    exit(1);
  }

  check(sampan_engine_create(config, &engine), "sampan_engine_create");
  check(sampan_params_create(&params), "sampan_params_create");
  check(sampan_params_set_temperature(params, 0.0f), "set_temperature"); /* greedy */
  check(sampan_params_set_max_tokens(params, max_tokens), "set_max_tokens");
  check(sampan_params_set_ignore_eos(params, 1), "set_ignore_eos");

  printf("generated: ");
  fflush(stdout);
  check(sampan_engine_submit_text(engine, prompt, params, on_event, g, &request),
        "sampan_engine_submit_text");
  check(sampan_request_wait(request, -1), "sampan_request_wait");
  printf("\n");

  printf("tokens:");
  for (i = 0; i < g->n_tokens; ++i) printf(" %d", (int)g->tokens[i]);
  printf("\n");
  printf("finish: %s prompt_tokens=%lld completion_tokens=%lld\n", g->finish,
         (long long)g->prompt_tokens, (long long)g->completion_tokens);

  check(sampan_request_destroy(request), "sampan_request_destroy");
  check(sampan_params_destroy(params), "sampan_params_destroy");
  check(sampan_engine_destroy(engine), "sampan_engine_destroy");
  free(g);
}

int main(int argc, char** argv) {
  SampanConfig* config = NULL;
  int64_t ids[MAX_IDS] = {1, 2, 3, 4, 5};
  int64_t n_ids = 5;
  const char* prompt = "Once upon a time";
  int64_t max_tokens = 16;
  int32_t threads = 0;
  int64_t kv_cache_mib = 64;
  int generate = 1;
  int i;

  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr,
            "usage: %s MODEL_DIR [--ids 1,2,3] [--prompt TEXT] [--max-tokens N] [--threads N] "
            "[--kv-cache-mib N] [--no-generate]\n",
            argv[0]);
    return 2;
  }
  for (i = 2; i < argc; ++i) {
    const int has_value = i + 1 < argc;
    if (strcmp(argv[i], "--ids") == 0 && has_value) {
      if (!parse_ids(argv[++i], ids, &n_ids)) {
        fprintf(stderr, "error: --ids takes up to %d comma-separated integers\n", MAX_IDS);
        return 2;
      }
    } else if (strcmp(argv[i], "--prompt") == 0 && has_value) {
      prompt = argv[++i];
    } else if (strcmp(argv[i], "--max-tokens") == 0 && has_value) {
      max_tokens = strtoll(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--threads") == 0 && has_value) {
      threads = (int32_t)strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--kv-cache-mib") == 0 && has_value) {
      kv_cache_mib = strtoll(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--no-generate") == 0) {
      generate = 0;
    } else {
      fprintf(stderr, "error: unknown or incomplete argument '%s'\n", argv[i]);
      return 2;
    }
  }

  if (sampan_abi_version() != SAMPAN_ABI_VERSION) {
    fprintf(stderr, "error: libsampan ABI %d, this program was built for %d\n",
            (int)sampan_abi_version(), SAMPAN_ABI_VERSION);
    return 1;
  }
  printf("sampan %s\n", sampan_version());

  check(sampan_config_create(&config), "sampan_config_create");
  check(sampan_config_set_model_dir(config, argv[1]), "sampan_config_set_model_dir");
  check(sampan_config_set_device(config, "cpu"), "sampan_config_set_device");
  check(sampan_config_set_threads(config, threads), "sampan_config_set_threads");
  /* The engine allocates its whole KV cache up front (library default 1 GiB); it must hold one
   * sequence of the model's max_model_len. */
  check(sampan_config_set_kv_cache_bytes(config, kv_cache_mib << 20),
        "sampan_config_set_kv_cache_bytes");

  run_predictor(config, ids, n_ids);
  if (generate) run_generation(config, prompt, max_tokens);

  check(sampan_config_destroy(config), "sampan_config_destroy");
  return 0;
}
