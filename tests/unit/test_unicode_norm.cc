// NFC/NFD/NFKC/NFKD against Python's unicodedata (Unicode 14.0.0, the version the tables were
// generated from): expected strings and per-code-point hashes below were computed in Python and
// pasted here, so the C++ code is never checked against itself. Invariants and
// NormalizationTest.txt-style conformance checks come on top.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/unicode_norm.h"

namespace u = sampan::tok::unicode;
using u::NormForm;

namespace {

struct Case {
  std::u32string src, nfc, nfd, nfkc, nfkd;
};

// Columns: source, NFC, NFD, NFKC, NFKD, each from unicodedata.normalize(form, source) in Python.
const std::vector<Case> kCases = {
    {U"", U"", U"", U"", U""},
    {U"abc", U"abc", U"abc", U"abc", U"abc"},
    {U"\U000000E9", U"\U000000E9", U"e\U00000301", U"\U000000E9", U"e\U00000301"},
    {U"e\U00000301", U"\U000000E9", U"e\U00000301", U"\U000000E9", U"e\U00000301"},
    {U"\U000000C5", U"\U000000C5", U"A\U0000030A", U"\U000000C5", U"A\U0000030A"},
    {U"\U0000212B", U"\U000000C5", U"A\U0000030A", U"\U000000C5", U"A\U0000030A"},
    {U"A\U0000030A", U"\U000000C5", U"A\U0000030A", U"\U000000C5", U"A\U0000030A"},
    {U"\U00002126", U"\U000003A9", U"\U000003A9", U"\U000003A9", U"\U000003A9"},
    {U"\U00001E0B\U00000323", U"\U00001E0D\U00000307", U"d\U00000323\U00000307", U"\U00001E0D\U00000307", U"d\U00000323\U00000307"},
    {U"d\U00000323\U00000307", U"\U00001E0D\U00000307", U"d\U00000323\U00000307", U"\U00001E0D\U00000307", U"d\U00000323\U00000307"},
    {U"d\U00000307\U00000323", U"\U00001E0D\U00000307", U"d\U00000323\U00000307", U"\U00001E0D\U00000307", U"d\U00000323\U00000307"},
    {U"q\U00000307\U00000323", U"q\U00000323\U00000307", U"q\U00000323\U00000307", U"q\U00000323\U00000307", U"q\U00000323\U00000307"},
    {U"\U00001E9B\U00000323", U"\U00001E9B\U00000323", U"\U0000017F\U00000323\U00000307", U"\U00001E69", U"s\U00000323\U00000307"},
    {U"a\U00000328\U00000301\U00000323", U"\U00000105\U00000323\U00000301", U"a\U00000328\U00000323\U00000301", U"\U00000105\U00000323\U00000301", U"a\U00000328\U00000323\U00000301"},
    {U"\U00000301a", U"\U00000301a", U"\U00000301a", U"\U00000301a", U"\U00000301a"},
    {U"\U00000301\U00000300", U"\U00000301\U00000300", U"\U00000301\U00000300", U"\U00000301\U00000300", U"\U00000301\U00000300"},
    {U"a\U00000315\U00000300\U000005AE\U00000300b", U"\U000000E0\U000005AE\U00000300\U00000315b", U"a\U000005AE\U00000300\U00000300\U00000315b", U"\U000000E0\U000005AE\U00000300\U00000315b", U"a\U000005AE\U00000300\U00000300\U00000315b"},
    {U"\U000005B8\U000005B9\U000005B1\U00000591\U000005C3\U000005B0\U000005AC\U0000059F", U"\U000005B1\U000005B8\U000005B9\U00000591\U000005C3\U000005B0\U000005AC\U0000059F", U"\U000005B1\U000005B8\U000005B9\U00000591\U000005C3\U000005B0\U000005AC\U0000059F", U"\U000005B1\U000005B8\U000005B9\U00000591\U000005C3\U000005B0\U000005AC\U0000059F", U"\U000005B1\U000005B8\U000005B9\U00000591\U000005C3\U000005B0\U000005AC\U0000059F"},
    {U"\U0000AC00", U"\U0000AC00", U"\U00001100\U00001161", U"\U0000AC00", U"\U00001100\U00001161"},
    {U"\U0000AC01", U"\U0000AC01", U"\U00001100\U00001161\U000011A8", U"\U0000AC01", U"\U00001100\U00001161\U000011A8"},
    {U"\U00001100\U00001161\U000011A8", U"\U0000AC01", U"\U00001100\U00001161\U000011A8", U"\U0000AC01", U"\U00001100\U00001161\U000011A8"},
    {U"\U00001100\U00001161", U"\U0000AC00", U"\U00001100\U00001161", U"\U0000AC00", U"\U00001100\U00001161"},
    {U"\U0000AC00\U000011A8", U"\U0000AC01", U"\U00001100\U00001161\U000011A8", U"\U0000AC01", U"\U00001100\U00001161\U000011A8"},
    {U"\U0000AC00\U00000300\U000011A8", U"\U0000AC00\U00000300\U000011A8", U"\U00001100\U00001161\U00000300\U000011A8", U"\U0000AC00\U00000300\U000011A8", U"\U00001100\U00001161\U00000300\U000011A8"},
    {U"\U00001161\U000011A8", U"\U00001161\U000011A8", U"\U00001161\U000011A8", U"\U00001161\U000011A8", U"\U00001161\U000011A8"},
    {U"\U0000D55C\U0000AD6D\U0000C5B4", U"\U0000D55C\U0000AD6D\U0000C5B4", U"\U00001112\U00001161\U000011AB\U00001100\U0000116E\U000011A8\U0000110B\U00001165", U"\U0000D55C\U0000AD6D\U0000C5B4", U"\U00001112\U00001161\U000011AB\U00001100\U0000116E\U000011A8\U0000110B\U00001165"},
    {U"\U00001112\U00001161\U000011AB\U00001100\U0000116E\U000011A8", U"\U0000D55C\U0000AD6D", U"\U00001112\U00001161\U000011AB\U00001100\U0000116E\U000011A8", U"\U0000D55C\U0000AD6D", U"\U00001112\U00001161\U000011AB\U00001100\U0000116E\U000011A8"},
    {U"\U0000FB01", U"\U0000FB01", U"\U0000FB01", U"fi", U"fi"},
    {U"\U00002460", U"\U00002460", U"\U00002460", U"1", U"1"},
    {U"\U0000FF21\U0000FF22\U0000FF43", U"\U0000FF21\U0000FF22\U0000FF43", U"\U0000FF21\U0000FF22\U0000FF43", U"ABc", U"ABc"},
    {U"x\U000000B2", U"x\U000000B2", U"x\U000000B2", U"x2", U"x2"},
    {U"\U000000BD", U"\U000000BD", U"\U000000BD", U"1\U000020442", U"1\U000020442"},
    {U"\U000001C4", U"\U000001C4", U"\U000001C4", U"D\U0000017D", U"DZ\U0000030C"},
    {U"\U00000344", U"\U00000308\U00000301", U"\U00000308\U00000301", U"\U00000308\U00000301", U"\U00000308\U00000301"},
    {U"\U00000958", U"\U00000915\U0000093C", U"\U00000915\U0000093C", U"\U00000915\U0000093C", U"\U00000915\U0000093C"},
    {U"\U00000915\U0000093C", U"\U00000915\U0000093C", U"\U00000915\U0000093C", U"\U00000915\U0000093C", U"\U00000915\U0000093C"},
    {U"\U00000928\U0000093C", U"\U00000929", U"\U00000928\U0000093C", U"\U00000929", U"\U00000928\U0000093C"},
    {U"\U00000929", U"\U00000929", U"\U00000928\U0000093C", U"\U00000929", U"\U00000928\U0000093C"},
    {U"\U00000B47\U00000B3E", U"\U00000B4B", U"\U00000B47\U00000B3E", U"\U00000B4B", U"\U00000B47\U00000B3E"},
    {U"\U00001025\U0000102E", U"\U00001026", U"\U00001025\U0000102E", U"\U00001026", U"\U00001025\U0000102E"},
    {U"\U00000F73", U"\U00000F71\U00000F72", U"\U00000F71\U00000F72", U"\U00000F71\U00000F72", U"\U00000F71\U00000F72"},
    {U"\U00001F82", U"\U00001F82", U"\U000003B1\U00000313\U00000300\U00000345", U"\U00001F82", U"\U000003B1\U00000313\U00000300\U00000345"},
    {U"\U000003D3", U"\U000003D3", U"\U000003D2\U00000301", U"\U0000038E", U"\U000003A5\U00000301"},
    {U"\U0000FDFA", U"\U0000FDFA", U"\U0000FDFA", U"\U00000635\U00000644\U00000649 \U00000627\U00000644\U00000644\U00000647 \U00000639\U00000644\U0000064A\U00000647 \U00000648\U00000633\U00000644\U00000645", U"\U00000635\U00000644\U00000649 \U00000627\U00000644\U00000644\U00000647 \U00000639\U00000644\U0000064A\U00000647 \U00000648\U00000633\U00000644\U00000645"},
    {U"\U00003300", U"\U00003300", U"\U00003300", U"\U000030A2\U000030D1\U000030FC\U000030C8", U"\U000030A2\U000030CF\U0000309A\U000030FC\U000030C8"},
    {U"\U0001D400", U"\U0001D400", U"\U0001D400", U"A", U"A"},
    {U"\U0001D15E", U"\U0001D157\U0001D165", U"\U0001D157\U0001D165", U"\U0001D157\U0001D165", U"\U0001D157\U0001D165"},
    {U"\U000110AB", U"\U000110AB", U"\U000110A5\U000110BA", U"\U000110AB", U"\U000110A5\U000110BA"},
    {U"Ti\U00001EBFng Vi\U00001EC7t", U"Ti\U00001EBFng Vi\U00001EC7t", U"Tie\U00000302\U00000301ng Vie\U00000323\U00000302t", U"Ti\U00001EBFng Vi\U00001EC7t", U"Tie\U00000302\U00000301ng Vie\U00000323\U00000302t"},
    {U"Tie\U00000302\U00000301ng Vie\U00000323\U00000302t", U"Ti\U00001EBFng Vi\U00001EC7t", U"Tie\U00000302\U00000301ng Vie\U00000323\U00000302t", U"Ti\U00001EBFng Vi\U00001EC7t", U"Tie\U00000302\U00000301ng Vie\U00000323\U00000302t"},
    {U"\U00000939\U0000093F\U00000928\U0000094D\U00000926\U00000940", U"\U00000939\U0000093F\U00000928\U0000094D\U00000926\U00000940", U"\U00000939\U0000093F\U00000928\U0000094D\U00000926\U00000940", U"\U00000939\U0000093F\U00000928\U0000094D\U00000926\U00000940", U"\U00000939\U0000093F\U00000928\U0000094D\U00000926\U00000940"},
    {U"\U00001E69\U00000307", U"\U00001E69\U00000307", U"s\U00000323\U00000307\U00000307", U"\U00001E69\U00000307", U"s\U00000323\U00000307\U00000307"},
    {U"s\U00000307\U00000323", U"\U00001E69", U"s\U00000323\U00000307", U"\U00001E69", U"s\U00000323\U00000307"},
    {U"A\U00000300\U00000316", U"\U000000C0\U00000316", U"A\U00000316\U00000300", U"\U000000C0\U00000316", U"A\U00000316\U00000300"},
    {U"\U000000C0\U00000316", U"\U000000C0\U00000316", U"A\U00000316\U00000300", U"\U000000C0\U00000316", U"A\U00000316\U00000300"},
    {U"\U00001100\U0000AC00\U000011A8\U000011A8", U"\U00001100\U0000AC01\U000011A8", U"\U00001100\U00001100\U00001161\U000011A8\U000011A8", U"\U00001100\U0000AC01\U000011A8", U"\U00001100\U00001100\U00001161\U000011A8\U000011A8"},
    {U"\U00000FB2\U00000F80", U"\U00000FB2\U00000F80", U"\U00000FB2\U00000F80", U"\U00000FB2\U00000F80", U"\U00000FB2\U00000F80"},
    {U"\U00000F77", U"\U00000F77", U"\U00000F77", U"\U00000FB2\U00000F71\U00000F80", U"\U00000FB2\U00000F71\U00000F80"},
    {U"\U0000212B\U00000301", U"\U000001FA", U"A\U0000030A\U00000301", U"\U000001FA", U"A\U0000030A\U00000301"},
    {U"\U00002000", U"\U00002002", U"\U00002002", U" ", U" "},
    {U"\U000000A0", U"\U000000A0", U"\U000000A0", U" ", U" "},
    {U"\U00003131", U"\U00003131", U"\U00003131", U"\U00001100", U"\U00001100"},
    {U"\U00001FF3", U"\U00001FF3", U"\U000003C9\U00000345", U"\U00001FF3", U"\U000003C9\U00000345"},
    {U"\U00002FA1d", U"\U00002FA1d", U"\U00002FA1d", U"\U00008FB5d", U"\U00008FB5d"},
};

std::u32string nfc(std::u32string_view s) { return u::normalize(NormForm::kNfc, s); }
std::u32string nfd(std::u32string_view s) { return u::normalize(NormForm::kNfd, s); }
std::u32string nfkc(std::u32string_view s) { return u::normalize(NormForm::kNfkc, s); }
std::u32string nfkd(std::u32string_view s) { return u::normalize(NormForm::kNfkd, s); }

std::string utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) u::append_utf8(out, c);
  return out;
}

// FNV-1a over the image of every code point (surrogates skipped), 0x110000 after each image.
uint64_t hash_all_code_points(NormForm form, int* changed) {
  uint64_t h = 0xcbf29ce484222325ull;
  *changed = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    const char32_t one[1] = {cp};
    const std::u32string r = u::normalize(form, std::u32string_view(one, 1));
    if (r != std::u32string_view(one, 1)) ++*changed;
    for (char32_t c : r) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0x110000u) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace

TEST_CASE("unicode_norm: strings match Python unicodedata", "[unicode_norm]") {
  for (const Case& c : kCases) {
    INFO("source " << utf8(c.src));
    CHECK(nfc(c.src) == c.nfc);
    CHECK(nfd(c.src) == c.nfd);
    CHECK(nfkc(c.src) == c.nfkc);
    CHECK(nfkd(c.src) == c.nfkd);
    // The UTF-8 entry point agrees with the code-point one.
    CHECK(u::normalize(NormForm::kNfc, std::string_view(utf8(c.src))) == utf8(c.nfc));
    CHECK(u::normalize(NormForm::kNfkd, std::string_view(utf8(c.src))) == utf8(c.nfkd));
  }
}

TEST_CASE("unicode_norm: NormalizationTest-style conformance on the pasted cases", "[unicode_norm]") {
  // With c1..c5 = source, NFC, NFD, NFKC, NFKD (UAX #15 test file layout):
  for (const Case& c : kCases) {
    INFO("source " << utf8(c.src));
    for (const std::u32string* x : {&c.src, &c.nfc, &c.nfd}) {
      CHECK(nfc(*x) == c.nfc);
      CHECK(nfd(*x) == c.nfd);
    }
    for (const std::u32string* x : {&c.nfkc, &c.nfkd}) {
      CHECK(nfc(*x) == c.nfkc);
      CHECK(nfd(*x) == c.nfkd);
    }
    for (const std::u32string* x : {&c.src, &c.nfc, &c.nfd, &c.nfkc, &c.nfkd}) {
      CHECK(nfkc(*x) == c.nfkc);
      CHECK(nfkd(*x) == c.nfkd);
    }
  }
}

TEST_CASE("unicode_norm: every code point matches Python unicodedata", "[unicode_norm]") {
  // Hashes and counts of changed code points from Python (see hash_all_code_points).
  struct Expect {
    NormForm form;
    uint64_t hash;
    int changed;
  };
  const Expect expects[] = {{NormForm::kNfc, 0xab67fbc7b166cf6dull, 1120},
                            {NormForm::kNfd, 0xedbe63990c030e8eull, 13233},
                            {NormForm::kNfkc, 0x01fea99d69caff06ull, 4866},
                            {NormForm::kNfkd, 0x43fc1e0ea706fb9cull, 16967}};
  for (const Expect& e : expects) {
    int changed = 0;
    CHECK(hash_all_code_points(e.form, &changed) == e.hash);
    CHECK(changed == e.changed);
  }
}

TEST_CASE("unicode_norm: invariants over many code points and pairs", "[unicode_norm]") {
  // Each code point alone and followed by a few combining marks (so composition and reordering
  // run), stepping through the whole range; NFC/NFKC stability and NFD round trips hold for all.
  const char32_t tails[][3] = {{0x0301, 0, 0}, {0x0323, 0x0302, 0}, {0x0302, 0x0323, 0}, {0x11A8, 0, 0},
                               {0x1161, 0x11AF, 0}, {0x093C, 0, 0}, {0x0F72, 0x0F71, 0x0F80}};
  int checked = 0;
  for (char32_t cp = 0; cp < 0x110000; cp += (cp < 0x3400 ? 1 : 7)) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    for (const auto& tail : tails) {
      std::u32string x(1, cp);
      for (char32_t t : tail) {
        if (t != 0) x.push_back(t);
      }
      const std::u32string c = nfc(x), d = nfd(x), kc = nfkc(x), kd = nfkd(x);
      const bool ok = nfc(d) == c && nfd(c) == d && nfc(c) == c && nfd(d) == d && nfkc(kd) == kc &&
                      nfkd(kc) == kd && nfkc(kc) == kc && nfkd(kd) == kd && nfkc(c) == kc &&
                      nfkd(d) == kd;
      if (!ok) FAIL_CHECK("invariant broken for U+" << std::hex << static_cast<uint32_t>(cp));
      ++checked;
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("unicode_norm: combining classes and form names", "[unicode_norm]") {
  // Values from unicodedata.combining.
  CHECK(u::combining_class(U'a') == 0);
  CHECK(u::combining_class(0x0301) == 230);
  CHECK(u::combining_class(0x0323) == 220);
  CHECK(u::combining_class(0x0334) == 1);
  CHECK(u::combining_class(0x093C) == 7);
  CHECK(u::combining_class(0x05B0) == 10);
  CHECK(u::combining_class(0x1D16E) == 216);
  CHECK(u::combining_class(0x10FFFF) == 0);
  NormForm f = NormForm::kNfc;
  CHECK(u::parse_norm_form("NFKD", f));
  CHECK(f == NormForm::kNfkd);
  CHECK_FALSE(u::parse_norm_form("nfc", f));
}

TEST_CASE("unicode_norm: UTF-8 entry point", "[unicode_norm]") {
  CHECK(u::normalize(NormForm::kNfc, std::string_view("plain ascii")) == "plain ascii");
  CHECK(u::normalize(NormForm::kNfc, std::string_view("e\xCC\x81")) == "\xC3\xA9");
  CHECK(u::normalize(NormForm::kNfd, std::string_view("\xC3\xA9")) == "e\xCC\x81");
  CHECK(u::normalize(NormForm::kNfkc, std::string_view("\xEF\xAC\x81")) == "fi");  // U+FB01
  // Invalid bytes come out as U+FFFD, one per byte, like the rest of the tokenizer's decoding.
  CHECK(u::normalize(NormForm::kNfc, std::string_view("a\xFF")) == "a\xEF\xBF\xBD");
}
