// nltk's PorterStemmer (NLTK_EXTENSIONS mode), step by step in the same order and with the same rule lists, so
// that any difference from nltk shows up as a difference in one named step.
#include "eval/porter_stemmer.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"

namespace t5scale {
namespace {

bool is_vowel_letter(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

bool ends_with(const std::string& word, std::string_view suffix) {
  return word.size() >= suffix.size() && word.compare(word.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string drop_suffix(const std::string& word, std::size_t suffix_length) {
  return word.substr(0, word.size() - suffix_length);
}

// True at i when word[i] is a consonant: not a vowel letter, and a 'y' only when the letter before it is not a
// consonant (a 'y' that starts the word is one).
std::vector<bool> consonant_flags(const std::string& word) {
  std::vector<bool> flags(word.size());
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (is_vowel_letter(word[i])) {
      flags[i] = false;
    } else if (word[i] == 'y') {
      flags[i] = i == 0 ? true : !flags[i - 1];
    } else {
      flags[i] = true;
    }
  }
  return flags;
}

bool is_consonant(const std::string& word, std::size_t i) { return consonant_flags(word.substr(0, i + 1))[i]; }

// m in [C](VC){m}[V]: the number of vowel-consonant transitions.
int measure(const std::string& stem) {
  const std::vector<bool> flags = consonant_flags(stem);
  int m = 0;
  for (std::size_t i = 0; i + 1 < flags.size(); ++i) {
    if (!flags[i] && flags[i + 1]) ++m;
  }
  return m;
}

bool has_positive_measure(const std::string& stem) { return measure(stem) > 0; }

bool contains_vowel(const std::string& stem) {
  for (bool consonant : consonant_flags(stem)) {
    if (!consonant) return true;
  }
  return false;
}

// *d: ends with a double consonant.
bool ends_double_consonant(const std::string& word) {
  const std::size_t n = word.size();
  return n >= 2 && word[n - 1] == word[n - 2] && is_consonant(word, n - 1);
}

// *o: ends consonant-vowel-consonant, the last not w, x or y; nltk adds a two-letter vowel-consonant word.
bool ends_cvc(const std::string& word) {
  const std::size_t n = word.size();
  if (n >= 3 && is_consonant(word, n - 3) && !is_consonant(word, n - 2) && is_consonant(word, n - 1) &&
      word[n - 1] != 'w' && word[n - 1] != 'x' && word[n - 1] != 'y') {
    return true;
  }
  return n == 2 && !is_consonant(word, 0) && is_consonant(word, 1);
}

using Condition = std::function<bool(const std::string& stem)>;

struct Rule {
  std::string suffix;  // "*d" stands for any double consonant
  std::string replacement;
  Condition condition;  // empty: unconditional
};

// The first rule whose suffix matches decides: applied if its condition holds, otherwise the word is returned
// unchanged without trying the later rules.
std::string apply_rule_list(const std::string& word, const std::vector<Rule>& rules) {
  for (const Rule& rule : rules) {
    if (rule.suffix == "*d" && ends_double_consonant(word)) {
      const std::string stem = drop_suffix(word, 2);
      if (!rule.condition || rule.condition(stem)) return stem + rule.replacement;
      return word;
    }
    if (ends_with(word, rule.suffix)) {
      const std::string stem = drop_suffix(word, rule.suffix.size());
      if (!rule.condition || rule.condition(stem)) return stem + rule.replacement;
      return word;
    }
  }
  return word;
}

std::string step1a(const std::string& word) {
  if (ends_with(word, "ies") && word.size() == 4) return drop_suffix(word, 3) + "ie";
  return apply_rule_list(word, {{"sses", "ss", {}}, {"ies", "i", {}}, {"ss", "ss", {}}, {"s", "", {}}});
}

std::string step1b(const std::string& word) {
  if (ends_with(word, "ied")) return drop_suffix(word, 3) + (word.size() == 4 ? "ie" : "i");
  if (ends_with(word, "eed")) {
    const std::string stem = drop_suffix(word, 3);
    return measure(stem) > 0 ? stem + "ee" : word;
  }
  std::string intermediate;
  bool removed = false;
  for (const char* suffix : {"ed", "ing"}) {
    if (ends_with(word, suffix)) {
      intermediate = drop_suffix(word, std::string_view(suffix).size());
      if (contains_vowel(intermediate)) {
        removed = true;
        break;
      }
    }
  }
  if (!removed) return word;
  // contains_vowel guarantees a non-empty stem, so its last letter exists.
  const char last = intermediate.back();
  return apply_rule_list(
      intermediate,
      {{"at", "ate", {}},
       {"bl", "ble", {}},
       {"iz", "ize", {}},
       {"*d", std::string(1, last), [last](const std::string&) { return last != 'l' && last != 's' && last != 'z'; }},
       {"", "e", [](const std::string& stem) { return measure(stem) == 1 && ends_cvc(stem); }}});
}

std::string step1c(const std::string& word) {
  return apply_rule_list(
      word,
      {{"y", "i", [](const std::string& stem) { return stem.size() > 1 && is_consonant(stem, stem.size() - 1); }}});
}

std::string step2(const std::string& word) {
  if (ends_with(word, "alli") && has_positive_measure(drop_suffix(word, 4))) {
    return step2(drop_suffix(word, 4) + "al");
  }
  const Condition positive = has_positive_measure;
  // The "logi" rule keeps the "l" with the stem when measuring, so that short stems (geo-, theo-) qualify.
  const std::string word_but_three = drop_suffix(word, std::min<std::size_t>(3, word.size()));
  return apply_rule_list(
      word, {{"ational", "ate", positive},
             {"tional", "tion", positive},
             {"enci", "ence", positive},
             {"anci", "ance", positive},
             {"izer", "ize", positive},
             {"bli", "ble", positive},
             {"alli", "al", positive},
             {"entli", "ent", positive},
             {"eli", "e", positive},
             {"ousli", "ous", positive},
             {"ization", "ize", positive},
             {"ation", "ate", positive},
             {"ator", "ate", positive},
             {"alism", "al", positive},
             {"iveness", "ive", positive},
             {"fulness", "ful", positive},
             {"ousness", "ous", positive},
             {"aliti", "al", positive},
             {"iviti", "ive", positive},
             {"biliti", "ble", positive},
             {"fulli", "ful", positive},
             {"logi", "log", [word_but_three](const std::string&) { return has_positive_measure(word_but_three); }}});
}

std::string step3(const std::string& word) {
  const Condition positive = has_positive_measure;
  return apply_rule_list(word, {{"icate", "ic", positive},
                                {"ative", "", positive},
                                {"alize", "al", positive},
                                {"iciti", "ic", positive},
                                {"ical", "ic", positive},
                                {"ful", "", positive},
                                {"ness", "", positive}});
}

std::string step4(const std::string& word) {
  const Condition above_one = [](const std::string& stem) { return measure(stem) > 1; };
  return apply_rule_list(
      word, {{"al", "", above_one},
             {"ance", "", above_one},
             {"ence", "", above_one},
             {"er", "", above_one},
             {"ic", "", above_one},
             {"able", "", above_one},
             {"ible", "", above_one},
             {"ant", "", above_one},
             {"ement", "", above_one},
             {"ment", "", above_one},
             {"ent", "", above_one},
             {"ion", "",
              [](const std::string& stem) { return measure(stem) > 1 && (stem.back() == 's' || stem.back() == 't'); }},
             {"ou", "", above_one},
             {"ism", "", above_one},
             {"ate", "", above_one},
             {"iti", "", above_one},
             {"ous", "", above_one},
             {"ive", "", above_one},
             {"ize", "", above_one}});
}

// Both (m>1) E and (m=1 and not *o) E are tried, unlike a rule list.
std::string step5a(const std::string& word) {
  if (ends_with(word, "e")) {
    const std::string stem = drop_suffix(word, 1);
    const int m = measure(stem);
    if (m > 1) return stem;
    if (m == 1 && !ends_cvc(stem)) return stem;
  }
  return word;
}

std::string step5b(const std::string& word) {
  const std::string word_but_one = drop_suffix(word, std::min<std::size_t>(1, word.size()));
  return apply_rule_list(word, {{"ll", "l", [word_but_one](const std::string&) { return measure(word_but_one) > 1; }}});
}

const std::string* irregular_form(const std::string& word) {
  static const std::vector<std::pair<std::string, std::string>> kIrregular = {
      {"sky", "sky"},        {"skies", "sky"},       {"dying", "die"},        {"lying", "lie"},
      {"tying", "tie"},      {"news", "news"},       {"innings", "inning"},   {"inning", "inning"},
      {"outings", "outing"}, {"outing", "outing"},   {"cannings", "canning"}, {"canning", "canning"},
      {"howe", "howe"},      {"proceed", "proceed"}, {"exceed", "exceed"},    {"succeed", "succeed"}};
  for (const auto& [form, stem] : kIrregular) {
    if (form == word) return &stem;
  }
  return nullptr;
}

}  // namespace

std::string porter_stem(std::string_view word) {
  std::string stem(word);
  for (char& c : stem) {
    const auto byte = static_cast<unsigned char>(c);
    T5S_CHECK(byte < 0x80, "porter_stem: '", word, "' is not ASCII (the stemmer follows nltk on ASCII words only)");
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (const std::string* irregular = irregular_form(stem)) return *irregular;
  if (word.size() <= 2) return stem;
  stem = step1a(stem);
  stem = step1b(stem);
  stem = step1c(stem);
  stem = step2(stem);
  stem = step3(stem);
  stem = step4(stem);
  stem = step5a(stem);
  stem = step5b(stem);
  return stem;
}

}  // namespace t5scale
