// The Porter stemmer exactly as nltk 3.10's PorterStemmer in its default mode (NLTK_EXTENSIONS), which is the
// stemmer rouge-score's use_stemmer=True applies. That mode differs from Porter's 1980 paper in:
//   - a table of irregular forms looked up first (skies/sky -> sky, dying -> die, lying -> lie, tying -> tie,
//     news -> news, innings/inning -> inning, outings/outing -> outing, cannings/canning -> canning,
//     howe, proceed, exceed, succeed unchanged);
//   - words of one or two characters are returned as they are;
//   - step 1a: a four-letter word ending in "ies" becomes "...ie" (ties -> tie, but flies -> fli);
//   - step 1b: "ied" becomes "ie" in a four-letter word and "i" otherwise, before every other 1b rule;
//     the *o condition also holds for a two-letter stem vowel-consonant (any consonant, w/x/y included);
//   - step 1c: y -> i only after a consonant that is not the first letter (happy -> happi, enjoy, sky unchanged);
//   - step 2: "alli" -> "al" first, and the result goes through step 2 again; "bli" -> "ble" instead of
//     "abli" -> "able"; extra rules "fulli" -> "ful" and "logi" -> "log" (measure taken with the "l" kept);
//   - step 5b's "ll" rule measures the word without its last letter.
// As everywhere in Porter's algorithm, only the first rule whose suffix matches is tried in each list.
#pragma once

#include <string>
#include <string_view>

namespace t5scale {

// The stem of `word`, lowercased first (ASCII). Characters other than a, e, i, o, u and y count as consonants,
// digits included, as in nltk. Throws t5scale::Error on a byte outside ASCII: nltk works on code points and the
// metrics only ever stem ASCII tokens, so a non-ASCII word is a caller's mistake.
std::string porter_stem(std::string_view word);

}  // namespace t5scale
