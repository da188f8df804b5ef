"""CMP: competence. Does the model read text at all? Perplexity on the built-in text, in-context copying and
greedy collapse, judged against bounds any trained model of the vocabulary meets (probes/competence/), with the
first layer where it fails (a logit lens) and what else in the run saw something odd."""
