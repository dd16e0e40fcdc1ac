/* header_c99.c compiled as strict C++ (-std=c++20 -pedantic -Wall -Wextra -Werror, meson.build):
 * a C++ compiler accepts the header alone and twice, and its initializers fill every field. */
#include "header_c99.c"
