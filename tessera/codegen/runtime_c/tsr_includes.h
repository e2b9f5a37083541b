/* The C library headers every translation unit tessera generates includes (pasted at its top). */
//@ includes
#include <stdint.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
