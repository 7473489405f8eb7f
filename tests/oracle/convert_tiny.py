#!/usr/bin/env python3
"""Run llama.cpp's own convert_hf_to_gguf.py on a tiny HF model directory,
with one change: the vocabulary written is the toy byte-level BPE vocabulary
of tiny_vocab.json in that directory (tokens, types, merges, ids), because
the converter only accepts tokenizers whose pre-tokenizer it recognises by
hash or a SentencePiece model file. Everything the engine is tested on -
the hyperparameter keys, tensor names, layouts, the Gemma "+1" folded into
the norm weights, phi3's fused tensors and LongRoPE factors, quantization -
is the converter's own code.

Usage (the oracle venv of tests/fixtures/model/NOTES.md):
    python convert_tiny.py LLAMA_CPP_DIR HF_DIR OUTFILE OUTTYPE
LLAMA_CPP_DIR is vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist
(pip download llama-cpp-python==0.3.36 --no-binary :all: --no-deps).
Called by make_arch_fixtures.py in a subprocess, so that the converter's
own gguf-py (LLAMA_CPP_DIR/gguf-py) is the one imported.
"""
import json
import os
import sys


def main():
    llama_dir, hf_dir, outfile, outtype = sys.argv[1:5]
    sys.path.insert(0, llama_dir)
    sys.path.insert(0, os.path.join(llama_dir, "gguf-py"))
    import convert_hf_to_gguf as conv  # noqa: E402  (llama.cpp's converter)

    with open(os.path.join(hf_dir, "tiny_vocab.json")) as f:
        voc = json.load(f)

    def set_vocab(self):
        w = self.gguf_writer
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(voc["pre"])
        w.add_token_list(voc["tokens"])
        w.add_token_types(voc["types"])
        w.add_token_merges(voc["merges"])
        w.add_bos_token_id(voc["bos"])
        w.add_eos_token_id(voc["eos"])
        w.add_add_bos_token(False)
        w.add_chat_template(voc["chat_template"])

    real_get = conv.get_model_class

    def get_model_class(name, mmproj=False):
        cls = real_get(name, mmproj)
        cls.set_vocab = set_vocab  # this process converts one model and exits
        if name == "MistralForCausalLM":
            # the converter maps Mistral to "llama" and drops sliding_window;
            # write it, as a GGUF that declares a window would have it
            real_params = cls.set_gguf_parameters

            def set_gguf_parameters(self):
                real_params(self)
                if self.hparams.get("sliding_window"):
                    self.gguf_writer.add_sliding_window(self.hparams["sliding_window"])
            cls.set_gguf_parameters = set_gguf_parameters
        return cls

    conv.get_model_class = get_model_class
    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outfile", outfile, "--outtype", outtype]
    conv.main()


if __name__ == "__main__":
    main()
