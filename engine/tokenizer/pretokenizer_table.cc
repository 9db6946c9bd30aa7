// tokenizer.ggml.pre -> pre-tokenizer. Each family is the Split sequence its model publishes in
// tokenizer.json (all "Isolated"), followed by GPT-2's byte-level mapping. The names and which
// family each belongs to follow llama.cpp's llama-vocab.cpp; where llama.cpp rewrote a published
// pattern for its own regex engine (case-insensitive groups spelled out, possessive quantifiers
// made greedy, class intersections replaced by hand-written splitters), the published form is used
// here, because PCRE2 runs it as Python's `regex` and HF `tokenizers` do. The exceptions are noted.
#include "engine/tokenizer/pretokenizer_table.h"

#include <algorithm>

namespace sampan::tok {
namespace {

using json = nlohmann::json;
using Text = GgufPreTokenizer::Text;

json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}

// --- Published patterns -----------------------------------------------------------------------

// The case-insensitive English contractions that open most GPT-4-era patterns.
#define SAMPAN_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

// Llama 3 (tiktoken cl100k): 1-3 digit groups, letters with one leading non-letter.
constexpr const char* kLlama3 = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: as Llama 3 with single digits.
constexpr const char* kQwen2 = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5: combining marks stay with their letters.
constexpr const char* kQwen35 = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Jais 2: Llama 3 with whitespace runs cut into power-of-two lengths.
constexpr const char* kJais2 = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
    R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S))"
    R"(|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";

// Seed-Coder: no newlines after punctuation runs.
constexpr const char* kSeedCoder = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Ling / Bailing MoE: the published pattern uses possessive quantifiers (PCRE2 has them).
constexpr const char* kBailing =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

// Qwen2 without the contractions, so Turkish apostrophe suffixes stay on their word.
constexpr const char* kUfakzeka =
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// EXAONE MoE: words may continue across single spaces.
constexpr const char* kExaoneMoe = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";

// MiniCPM 5: after its 1-3 digit split, digit runs are kept whole.
constexpr const char* kMiniCpm5 = SAMPAN_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Tekken (Mistral NeMo): words split at lower->upper case changes, no contractions.
#define SAMPAN_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define SAMPAN_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER "*" SAMPAN_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER "+" SAMPAN_LOWER
    "*" R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-4o (tiktoken o200k): Tekken's case split plus trailing contractions and 1-3 digits.
constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER "*" SAMPAN_LOWER "+" SAMPAN_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER
    "+" SAMPAN_LOWER "*" SAMPAN_CONTRACTIONS "?" R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Kimi K2 (tiktoken): Han runs first, and the o200k word classes minus Han. The published
// pattern intersects classes ([...&&[^\p{Han}]]), which PCRE2 10.42 lacks: a negative lookahead
// before each class character says the same. PCRE2's bare \p{Han} is the Script_Extensions set
// (it takes CJK punctuation such as U+3002 too); sc:Han is the Script property, as Python's
// `regex` and llama.cpp's Han test read it.
#define SAMPAN_K2_UPPER "(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define SAMPAN_K2_LOWER "(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
constexpr const char* kKimiK2 =
    "\\p{sc:Han}+|[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_K2_UPPER "*" SAMPAN_K2_LOWER "+" SAMPAN_CONTRACTIONS
    "?|[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_K2_UPPER "+" SAMPAN_K2_LOWER "*" SAMPAN_CONTRACTIONS
    "?" R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek V3 family: 1-3 digits, CJK + kana runs, then words with their marks.
constexpr const char* kDeepseekV3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepseekV3Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpark25Words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+)"
    R"(| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";

// DeepSeek Coder: its CJK class (as published: CJK ideographs, U+0800..U+4E00, Hangul).
constexpr const char* kDeepseekCoderCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// DeepSeek LLM's letter class (the scripts it keeps together with an optional leading space).
constexpr const char* kDeepseekLetters =
    "\\s?["
    "\\x{0041}-\\x{005A}\\x{0061}-\\x{007A}\\x{00B5}\\x{00C0}-\\x{00D6}"
    "\\x{00D8}-\\x{00F6}\\x{00F8}-\\x{01BA}\\x{01BC}-\\x{01BF}\\x{01C4}-\\x{0293}"
    "\\x{0295}-\\x{02AF}\\x{0370}-\\x{0373}\\x{0376}\\x{0377}\\x{037B}-\\x{037D}"
    "\\x{037F}\\x{0386}\\x{0388}-\\x{038A}\\x{038C}\\x{038E}-\\x{03A1}"
    "\\x{03A3}-\\x{03F5}\\x{03F7}-\\x{0481}\\x{048A}-\\x{052F}\\x{0531}-\\x{0556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
    "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+";

// BLOOM / Poro / GPT-3 Finnish: anything but whitespace and sentence punctuation (the
// parentheses and '|' inside the class are part of the published pattern).
constexpr const char* kBloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

// Youtu: Hangul, CJK punctuation, Bopomofo and CJK runs, then o200k-style words.
constexpr const char* kYoutuCjk =
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)"
    R"(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)"
    R"(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kYoutuWords =
    "[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER "*" SAMPAN_LOWER "+" SAMPAN_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" SAMPAN_UPPER
    "+" SAMPAN_LOWER "*" SAMPAN_CONTRACTIONS "?" R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// AFMoE (Arcee Trinity). llama.cpp splits digit runs into groups of three from the right with a
// hand-written splitter; this lookahead does the same. Then East/South-East Asian script runs.
constexpr const char* kAfmoeDigits = R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))";
constexpr const char* kAfmoeAsian =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF})"
    R"(\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{0E40}-\x{0E7F}\x{0E80}-\x{0EFF}\x{1780}-\x{17FF})"
    R"(\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)";

// Chameleon: sentinel and image tokens, tabs/newlines and 2-4 space runs, single digits,
// single punctuation characters, then GPT-2 words.
constexpr const char* kChameleonSplits[] = {
    R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))", R"(\p{N})",
    R"([\p{P}!-/:-@\[-`{-~])"};

// --- The table ----------------------------------------------------------------------------------

struct Family {
  std::vector<std::string> names;
  std::vector<json> steps;
  bool ignore_merges = false;
  Text text = Text::kByteLevel;
};

json sequence(std::vector<json> steps) { return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}}; }

const std::vector<Family>& families() {
  static const std::vector<Family> table = [] {
    std::vector<Family> t;
    // GPT-2's own pre-tokenizer (ByteLevel with its regex); "" and "default" are files from before
    // the key existed, read as GPT-2 (llama.cpp's fallback is a GPT-2-like regex sequence too).
    t.push_back({{"", "default", "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling",
                  "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                  "gigachat", "a.x-4.0", "mellum", "modern-bert", "exaone4"},
                 {byte_level(true)}});
    // StarCoder-style: Digits(individual_digits) before GPT-2's ByteLevel. \p{N} is Rust's
    // char::is_numeric (Nd, Nl, No), which HF's Digits tests.
    t.push_back({{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
                 {split(R"(\p{N})"), byte_level(true)}});
    t.push_back({{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                  "jina-v5-nano"},
                 {split(kLlama3), byte_level(false)},
                 true});
    t.push_back({{"dbrx", "smaug-bpe", "glm4", "chatglm-bpe", "chatglm4"}, {split(kLlama3), byte_level(false)}});
    t.push_back({{"jais-2"}, {split(kJais2), byte_level(false)}});
    t.push_back({{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "megrez",
                  "grok-2"},
                 {split(kQwen2), byte_level(false)}});
    t.push_back({{"qwen35"}, {split(kQwen35), byte_level(false)}});
    t.push_back({{"ufakzeka"}, {split(kUfakzeka), byte_level(false)}});
    t.push_back({{"laguna"}, {split(R"([^\n]+|[\n]+)"), split(kQwen2), byte_level(false)}});
    t.push_back({{"seed-coder"}, {split(kSeedCoder), byte_level(false)}});
    t.push_back({{"bailingmoe", "bailingmoe2", "llada-moe"}, {split(kBailing), byte_level(false)}});
    t.push_back({{"exaone-moe"}, {split(kExaoneMoe), byte_level(false)}});
    t.push_back({{"minicpm5"}, {split(R"(\p{N}{1,3})"), split(kMiniCpm5), byte_level(false)}, true});
    t.push_back({{"tekken"}, {split(kTekken), byte_level(false)}, true});
    t.push_back({{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {split(kGpt4o), byte_level(false)}});
    // llama.cpp adds \p{M} to its hand-written case lookaheads for this one; the published
    // classes already hold \p{M}, so it is o200k's pattern.
    t.push_back({{"granite-embed-multi-97m"}, {split(kGpt4o), byte_level(false)}, true});
    t.push_back({{"tiny_aya", "cohere2moe"},
                 {split(R"(\d{1,3}(?=(?:\d{3})*\b))"), split(kGpt4o), byte_level(false)}});
    t.push_back({{"kimi-k2"}, {split(kKimiK2), byte_level(false)}});
    t.push_back({{"deepseek-llm"},
                 {split("[\r\n]"), split(kDeepseekLetters),
                  split("\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"),
                  split("\\s+$"), split(kDeepseekCoderCjk), split("\\p{N}+"), byte_level(false)}});
    t.push_back({{"deepseek-coder"},
                 {split("[\r\n]"), split(R"(\s?\p{L}+)"), split(R"(\s?\p{P}+)"), split(kDeepseekCoderCjk),
                  split(R"(\p{N})"), byte_level(false)}});
    t.push_back({{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
                 {split(R"(\p{N}{1,3})"), split(kDeepseekV3Cjk), split(kDeepseekV3Words), byte_level(false)}});
    t.push_back({{"spark2_5"},
                 {split(R"(\p{N}{1,3})"), split(kDeepseekV3Cjk), split(kSpark25Words), split(R"(\p{N})"),
                  byte_level(false)}});
    t.push_back({{"youtu"}, {split(kYoutuCjk), split(kYoutuWords), byte_level(false)}, true});
    t.push_back({{"afmoe"}, {split(kAfmoeDigits), split(kAfmoeAsian), split(kDeepseekV3Words), byte_level(false)}});
    // Falcon's tokenizer.json: punctuation runs, GPT-2's ByteLevel, digit runs, then 3-digit groups
    // (the last two see byte-level characters, as in HF).
    t.push_back({{"falcon"},
                 {{{"type", "Punctuation"}, {"behavior", "Contiguous"}},
                  byte_level(true),
                  {{"type", "Digits"}, {"individual_digits", false}},
                  split("[0-9][0-9][0-9]")}});
    t.push_back({{"poro-chat", "bloom", "gpt3-finnish"}, {split(kBloom), byte_level(false)}});
    t.push_back({{"viking"}, {split(kBloom), split(R"(\p{N})"), byte_level(false)}});
    {
      std::vector<json> steps;
      for (const char* r : kChameleonSplits) steps.push_back(split(r));
      steps.push_back(byte_level(true));
      t.push_back({{"chameleon"}, std::move(steps)});
    }
    // SuperBPE: only digits are split (runs, then groups of three from the right); its merges
    // cross word boundaries. The second pattern matches empty strings: split points.
    t.push_back({{"superbpe"}, {split(R"(\p{N}+)"), split(R"((?=(\d{3})+(?!\d)))"), byte_level(false)}});
    // Gemma 4-style BPE over raw UTF-8 with spaces as U+2581, cut only at newline runs.
    t.push_back({{"gemma4", "granite-embed-multi-311m", "sarvam-moe"}, {split(R"([^\n]+|[\n]+)")}, false,
                 Text::kMetaspace});
    // jina-embeddings-v2-base-zh: whitespace-separated raw words.
    t.push_back({{"whitespace"},
                 {{{"type", "Split"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"behavior", "Removed"}, {"invert", false}}},
                 false,
                 Text::kRaw});
    return t;
  }();
  return table;
}

// The types llama.cpp (llama-vocab.cpp, as of llama-cpp-python 0.3.36) gives add_bos = true when
// the file does not say; measured by tokenizing with llama.cpp a GGUF of every known type without
// the key (tests/e2e/test_gguf_pretokenizers.py checks the same against llama.cpp).
constexpr std::string_view kAddsBos[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                         "pixtral", "midm-2.0", "lfm2", "jina-v5-nano", "tekken",
                                         "chameleon", "gemma4", "granite-embed-multi-311m"};
// ... and those it adds BOS for even when tokenizer.ggml.add_bos_token is false.
constexpr std::string_view kForcesBos[] = {"gemma4", "granite-embed-multi-311m"};

}  // namespace

std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name) {
  for (const Family& f : families()) {
    if (std::find(f.names.begin(), f.names.end(), name) == f.names.end()) continue;
    GgufPreTokenizer p;
    p.pre_tokenizer = f.steps.size() == 1 ? f.steps[0] : sequence(f.steps);
    p.text = f.text;
    p.ignore_merges = f.ignore_merges;
    p.add_bos = std::find(std::begin(kAddsBos), std::end(kAddsBos), name) != std::end(kAddsBos);
    p.force_bos = std::find(std::begin(kForcesBos), std::end(kForcesBos), name) != std::end(kForcesBos);
    return p;
  }
  return std::nullopt;
}

std::vector<std::string> gguf_pre_tokenizer_names() {
  std::vector<std::string> out;
  for (const Family& f : families()) out.insert(out.end(), f.names.begin(), f.names.end());
  return out;
}

}  // namespace sampan::tok
