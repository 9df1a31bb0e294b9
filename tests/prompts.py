"""Twenty-four varied prompts for losslessness tests: code, prose, chat,
repetitive text and non-English text."""

PROMPTS = [
    # code
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n# rewrite iteratively\n",
    "for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n}\nfor (int i = 0; i < n; i++) {\n",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;\n-- the same query for orders\nSELECT",
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n",
    "import numpy as np\nx = np.arange(10)\ny = x ** 2\nprint(y)\n# now with torch\n",
    "fn main() {\n    let v = vec![1, 2, 3];\n    for x in &v {\n        println!(\"{}\", x);\n    }\n}\n",
    # prose
    "The history of the printing press begins in the fifteenth century, when",
    "Summarize: The river rose for three days. Farmers moved their cattle to the hills. On the fourth day the rain stopped.",
    "In a quiet village by the sea there lived an old fisherman who",
    "Photosynthesis converts light energy into chemical energy. In summary, photosynthesis",
    # chat
    "<|user|>\nWhat is the capital of France?</s>\n<|assistant|>\n",
    "<|user|>\nGive me three tips for better sleep.</s>\n<|assistant|>\n",
    "<|system|>\nYou are terse.</s>\n<|user|>\nExplain recursion.</s>\n<|assistant|>\n",
    "User: can you help me fix my bike chain?\nAssistant:",
    # repetitive
    "a b c d a b c d a b c d a b c d a b",
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3,",
    "ha" * 30,
    "ERROR: disk full\nERROR: disk full\nERROR: disk full\nWARNING: retry\nERROR: disk full\n",
    # non-English
    "Il était une fois une petite fille qui habitait au bord de la forêt.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Der schnelle",
    "東京は日本の首都です。東京には多くの人が住んでいます。東京",
    "Москва — столица России. Москва — крупнейший город",
    "El niño comió una manzana roja. El niño",
]
