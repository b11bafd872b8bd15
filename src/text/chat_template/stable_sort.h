#pragma once
// A stable merge sort for the templates' sort filters and sorted JSON keys. std::stable_sort's
// temporary buffer trips AddressSanitizer's alloc-dealloc check with GCC 12's libstdc++, and
// std::sort needs a strict weak order a template's values need not give (it may then read out
// of bounds); a merge never does, whatever the comparison answers.
#include <algorithm>
#include <utility>
#include <vector>

namespace retnet::chat_template_detail {

template <class T, class Less>
void stable_sort_values(std::vector<T>& items, Less less) {
  std::vector<T> buffer(items.size());
  for (size_t width = 1; width < items.size(); width *= 2) {
    for (size_t lo = 0; lo < items.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, items.size()), hi = std::min(lo + 2 * width, items.size());
      size_t a = lo, b = mid, out = lo;
      // Take from the right run only when it is strictly less: equal items keep their order.
      while (a < mid && b < hi) buffer[out++] = less(items[b], items[a]) ? std::move(items[b++]) : std::move(items[a++]);
      while (a < mid) buffer[out++] = std::move(items[a++]);
      while (b < hi) buffer[out++] = std::move(items[b++]);
    }
    items.swap(buffer);
  }
}

}  // namespace retnet::chat_template_detail
