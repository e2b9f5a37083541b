/* The calling convention's tensor descriptor (C_HEADER in tessera/codegen/c_entry.py; its ctypes mirror in tessera/abi.py
 * TesseraTensor): pasted into every translation unit tessera generates. */
#include <stdint.h>
//@ tessera_tensor_t
typedef struct {
  void* data;              /* address of element 0 */
  const int64_t* shape;    /* ndim extents */
  const int64_t* strides;  /* ndim strides in elements, or NULL for compact row-major */
  int32_t ndim;
  uint8_t code;            /* 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, 10-13 float8, 17 float4 */
  uint8_t bits;
  uint16_t lanes;
} tessera_tensor_t;
