/* Run a model exported by tessera (`exe.export_library("model.so")` or `tessera compile m.onnx -o model.so`)
   on a raw input file, with no Python: run_model input.bin output.bin  (raw little-endian tensors). */
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

_Static_assert(TESSERA_MODEL_NUM_INPUTS == 1 && TESSERA_MODEL_NUM_OUTPUTS == 1, "one input, one output");

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s input.bin output.bin\n", argv[0]); return 2; }
  static unsigned char in[TESSERA_MODEL_INPUT_0_NBYTES], out[TESSERA_MODEL_OUTPUT_0_NBYTES];
  FILE* f = fopen(argv[1], "rb");
  if (!f || fread(in, 1, sizeof in, f) != sizeof in) { fprintf(stderr, "cannot read %zu bytes from %s\n", sizeof in, argv[1]); return 1; }
  fclose(f);
  tessera_model_t* model = tessera_model_create();
  const void* inputs[] = {in};
  void* outputs[] = {out};
  if (!model || tessera_model_run(model, inputs, outputs) != 0) { fprintf(stderr, "%s\n", tessera_model_error(model)); return 1; }
  tessera_model_destroy(model);
  if (!(f = fopen(argv[2], "wb")) || fwrite(out, 1, sizeof out, f) != sizeof out || fclose(f) != 0) { perror(argv[2]); return 1; }
  return 0;
}
